// nest._core: the thin pybind11 layer over cpp/stage_dp.hpp.
//
// It checks that every argument is a numpy array of the exact dtype (int64 / float64,
// native byte order), the right number of dimensions and C-contiguous -- nothing is
// converted silently -- hands views to the C++ core with the GIL released, and maps
// C++ exceptions to ValueError.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "../graphs.hpp"
#include "../routing.hpp"
#include "../schedule.hpp"
#include "../stage_dp.hpp"

namespace py = pybind11;

namespace {

template <class T>
const char* dtype_name();
template <>
const char* dtype_name<int64_t>() { return "int64"; }
template <>
const char* dtype_name<double>() { return "float64"; }
template <>
const char* dtype_name<int32_t>() { return "int32"; }
template <>
const char* dtype_name<float>() { return "float32"; }
template <>
const char* dtype_name<uint8_t>() { return "uint8"; }

// Check obj strictly and return a view on its data; `keep` holds the reference.
template <class T>
nest::ArrayView<T> view(const py::object& obj, const char* name, int ndim) {
    if (!py::isinstance<py::array>(obj))
        throw py::value_error(std::string(name) + " must be a numpy array");
    auto arr = py::reinterpret_borrow<py::array>(obj);
    // array_t<T>::check_ compares the dtype with PyArray_EquivTypes (byte order included);
    // with the default flags it does not look at the layout.
    if (!py::array_t<T>::check_(arr))
        throw py::value_error(std::string(name) + " must have dtype " + dtype_name<T>() + ", got " +
                              py::str(arr.dtype()).cast<std::string>());
    if (arr.ndim() != ndim)
        throw py::value_error(std::string(name) + " must have " + std::to_string(ndim) + " dimensions, got " +
                              std::to_string(arr.ndim()));
    if (!(arr.flags() & py::array::c_style))
        throw py::value_error(std::string(name) + " must be C-contiguous");
    auto typed = py::reinterpret_borrow<py::array_t<T, py::array::c_style>>(arr);
    nest::ArrayView<T> v;
    v.data = typed.data();
    v.ndim = ndim;
    for (int d = 0; d < ndim; ++d) v.shape[d] = static_cast<int64_t>(arr.shape(d));
    return v;
}

py::array_t<int64_t> to_numpy(const std::vector<int64_t>& values) {
    py::array_t<int64_t> out(static_cast<py::ssize_t>(values.size()));
    if (!values.empty()) std::memcpy(out.mutable_data(), values.data(), values.size() * sizeof(int64_t));
    return out;
}

py::tuple solve(const py::object& time_ps, const py::object& params, const py::object& mem_params,
                const py::object& act_bytes,
                const py::object& send_ps, const py::object& cand_config, const py::object& cand_scale,
                const py::object& cand_offset, const py::object& cand_head_scale,
                const py::object& cand_mem_fixed, const py::object& cand_mem_per_param, const py::object& cand_g0,
                const py::object& cand_g1, const py::object& cand_lower_bound, const py::object& pos_offset,
                const py::object& pos_inflight, const py::object& pos_mem_fixed, const py::object& pos_tier,
                double capacity, int threads, const py::object& host_params,
                const py::object& cand_host_per_param, double host_capacity) {
    nest::Problem pb;
    pb.time_ps = view<int64_t>(time_ps, "time_ps", 2);
    pb.params = view<int64_t>(params, "params", 2);
    pb.mem_params = view<int64_t>(mem_params, "mem_params", 2);
    pb.act_bytes = view<int64_t>(act_bytes, "act_bytes", 2);
    pb.send_ps = view<int64_t>(send_ps, "send_ps", 3);
    pb.cand_config = view<int64_t>(cand_config, "cand_config", 1);
    pb.cand_scale = view<int64_t>(cand_scale, "cand_scale", 1);
    pb.cand_offset = view<int64_t>(cand_offset, "cand_offset", 1);
    pb.cand_head_scale = view<int64_t>(cand_head_scale, "cand_head_scale", 1);
    pb.cand_mem_fixed = view<double>(cand_mem_fixed, "cand_mem_fixed", 1);
    pb.cand_mem_per_param = view<double>(cand_mem_per_param, "cand_mem_per_param", 1);
    pb.cand_g0 = view<double>(cand_g0, "cand_g0", 1);
    pb.cand_g1 = view<double>(cand_g1, "cand_g1", 1);
    pb.cand_lower_bound = view<int64_t>(cand_lower_bound, "cand_lower_bound", 1);
    pb.pos_offset = view<int64_t>(pos_offset, "pos_offset", 1);
    pb.pos_inflight = view<double>(pos_inflight, "pos_inflight", 1);
    pb.pos_mem_fixed = view<double>(pos_mem_fixed, "pos_mem_fixed", 1);
    pb.pos_tier = view<int64_t>(pos_tier, "pos_tier", 1);
    pb.capacity = capacity;
    // Without host tables (no offload) the host check is 0 <= 0 everywhere.
    std::vector<int64_t> no_host;
    std::vector<double> no_host_per_param;
    if (host_params.is_none()) {
        no_host.assign(static_cast<size_t>(std::max<int64_t>(pb.time_ps.size(), 0)), 0);
        pb.host_params = pb.time_ps;
        pb.host_params.data = no_host.data();
    } else {
        pb.host_params = view<int64_t>(host_params, "host_params", 2);
    }
    if (cand_host_per_param.is_none()) {
        no_host_per_param.assign(static_cast<size_t>(std::max<int64_t>(pb.cand_config.size(), 0)), 0.0);
        pb.cand_host_per_param.ndim = 1;
        pb.cand_host_per_param.shape[0] = pb.cand_config.shape[0];
        pb.cand_host_per_param.data = no_host_per_param.data();
    } else {
        pb.cand_host_per_param = view<double>(cand_host_per_param, "cand_host_per_param", 1);
    }
    pb.host_capacity = host_capacity;

    nest::Result result;
    std::string error;
    {
        py::gil_scoped_release release;
        try {
            nest::solve(pb, threads, result);
        } catch (const std::exception& e) {
            error = e.what();
            if (error.empty()) error = "stage DP failed";
        }
    }
    if (!error.empty()) throw py::value_error(error);
    return py::make_tuple(to_numpy(result.status), to_numpy(result.objective), to_numpy(result.max_time),
                          to_numpy(result.max_params), to_numpy(result.ends), result.best);
}

std::vector<double> times(const py::object& obj, const char* name) {
    auto v = view<double>(obj, name, 1);
    return std::vector<double>(v.data, v.data + v.shape[0]);
}

py::array_t<double> pipeline_finish(int64_t pp, int64_t vp, int64_t micro_batches, const py::object& forward,
                                    const py::object& recompute, const py::object& backward,
                                    const py::object& send_forward, const py::object& send_backward,
                                    int64_t extra_warmup) {
    const auto f = times(forward, "forward"), r = times(recompute, "recompute"), b = times(backward, "backward"),
               sf = times(send_forward, "send_forward"), sb = times(send_backward, "send_backward");
    std::vector<double> finish;
    std::string error;
    {
        py::gil_scoped_release release;
        try {
            finish = nest::pipeline_finish(pp, vp, micro_batches, f, r, b, sf, sb, extra_warmup);
        } catch (const std::exception& e) {
            error = e.what();
        }
    }
    if (!error.empty()) throw py::value_error(error);
    py::array_t<double> out(static_cast<py::ssize_t>(finish.size()));
    if (!finish.empty()) std::memcpy(out.mutable_data(), finish.data(), finish.size() * sizeof(double));
    return out;
}

template <class T>
py::array_t<T> vector_to_numpy(const std::vector<T>& values) {
    py::array_t<T> out(static_cast<py::ssize_t>(values.size()));
    if (!values.empty()) std::memcpy(out.mutable_data(), values.data(), values.size() * sizeof(T));
    return out;
}

template <class T>
void same_length(const nest::ArrayView<T>& v, int64_t n, const char* name, const char* of) {
    if (v.shape[0] != n)
        throw py::value_error(std::string(name) + " must have one value per " + of + " (" + std::to_string(n) +
                              "), got " + std::to_string(v.shape[0]));
}

py::tuple shortest_path_dags(const py::object& dist, const py::object& row, const py::object& source,
                             const py::object& target, const py::object& in_ptr, const py::object& eu,
                             const py::object& ev, const py::object& ecost, const py::object& elat,
                             const py::object& mul_tail, const py::object& mul_head) {
    const auto d = view<float>(dist, "dist", 2);
    const auto r = view<int64_t>(row, "row", 1), s = view<int64_t>(source, "source", 1),
               t = view<int64_t>(target, "target", 1), ptr = view<int64_t>(in_ptr, "in_ptr", 1),
               u = view<int64_t>(eu, "eu", 1), v = view<int64_t>(ev, "ev", 1);
    const auto cost = view<double>(ecost, "ecost", 1), lat = view<double>(elat, "elat", 1),
               mt = view<double>(mul_tail, "mul_tail", 1), mh = view<double>(mul_head, "mul_head", 1);
    const int64_t n = r.shape[0], links = u.shape[0];
    same_length(s, n, "source", "pair");
    same_length(t, n, "target", "pair");
    same_length(ptr, d.shape[1] + 1, "in_ptr", "router (plus one)");
    same_length(v, links, "ev", "link");
    for (const auto* a : {&cost, &lat, &mt, &mh}) same_length(*a, links, "link attributes", "link");
    nest::DagGraph g;
    g.dist = d.data;
    g.rows = d.shape[0];
    g.nr = d.shape[1];
    g.in_ptr = ptr.data;
    g.eu = u.data;
    g.ev = v.data;
    g.ecost = cost.data;
    g.elat = lat.data;
    g.mul_tail = mt.data;
    g.mul_head = mh.data;
    g.links = links;
    for (int64_t i = 0; i <= g.nr; ++i)
        if (ptr.data[i] < 0 || ptr.data[i] > links || (i > 0 && ptr.data[i] < ptr.data[i - 1]))
            throw py::value_error("in_ptr: not ascending offsets into the links");
    for (int64_t e = 0; e < links; ++e)
        if (u.data[e] < 0 || u.data[e] >= g.nr || v.data[e] < 0 || v.data[e] >= g.nr)
            throw py::value_error("eu, ev: router out of range");
    nest::Dags out;
    std::string error;
    {
        py::gil_scoped_release release;
        try {
            nest::shortest_path_dags(g, r.data, s.data, t.data, n, out);
        } catch (const std::exception& e) {
            error = e.what();
        }
    }
    if (!error.empty()) throw py::value_error(error);
    return py::make_tuple(vector_to_numpy(out.counts), vector_to_numpy(out.links), vector_to_numpy(out.fracs),
                          vector_to_numpy(out.lats));
}

py::array_t<double> label_ratios(const py::object& ptr, const py::object& edge, const py::object& frac,
                                 const py::object& ids, const py::object& amount, const py::object& label,
                                 int64_t nlabels, const py::object& capacity, const py::object& cell,
                                 const py::object& shift, const py::object& cell_link) {
    const auto p = view<int64_t>(ptr, "ptr", 1), i = view<int64_t>(ids, "ids", 1),
               lab = view<int64_t>(label, "label", 1);
    const auto e = view<int32_t>(edge, "edge", 1);
    const auto f = view<double>(frac, "frac", 1), amt = view<double>(amount, "amount", 1),
               cap = view<double>(capacity, "capacity", 1);
    const int64_t flows = i.shape[0];
    same_length(amt, flows, "amount", "flow");
    same_length(lab, flows, "label", "flow");
    same_length(f, e.shape[0], "frac", "entry");
    if (p.shape[0] < 1) throw py::value_error("ptr: empty");
    if (nlabels < 0) throw py::value_error("nlabels: negative");
    nest::DagEntries dags;
    dags.ptr = p.data;
    dags.pairs = p.shape[0] - 1;
    dags.edge = e.data;
    dags.frac = f.data;
    dags.entries = e.shape[0];
    nest::ArrayView<int64_t> sh;
    nest::ArrayView<int32_t> ce, cl;
    if (!cell.is_none()) {
        ce = view<int32_t>(cell, "cell", 1);
        sh = view<int64_t>(shift, "shift", 1);
        cl = view<int32_t>(cell_link, "cell_link", 1);
        same_length(ce, e.shape[0], "cell", "entry");
        same_length(sh, flows, "shift", "flow");
        dags.cell = ce.data;
        dags.shift = sh.data;
        dags.cell_link = cl.data;
        dags.cells = cl.shape[0];
    }
    py::array_t<double> out(static_cast<py::ssize_t>(nlabels));
    double* ratio = out.mutable_data();
    std::string error;
    {
        py::gil_scoped_release release;
        try {
            nest::label_ratios(dags, i.data, amt.data, lab.data, flows, nlabels, cap.data, cap.shape[0], ratio);
        } catch (const std::exception& ex) {
            error = ex.what();
        }
    }
    if (!error.empty()) throw py::value_error(error);
    return out;
}

// Optional int64 labels: None (every flow label 0) or one per flow.
const int64_t* optional_labels(const py::object& label, int64_t flows, nest::ArrayView<int64_t>& keep) {
    if (label.is_none()) return nullptr;
    keep = view<int64_t>(label, "label", 1);
    same_length(keep, flows, "label", "flow");
    return keep.data;
}

py::tuple route_pairs(const py::object& src, const py::object& dst, const py::object& amount,
                      const py::object& label, int64_t nlabels, const py::object& leaf, const py::object& up_cap,
                      const py::object& down_cap, const py::object& up_lat, const py::object& down_lat,
                      const py::object& router_of, int64_t routers, int mode) {
    const auto s = view<int64_t>(src, "src", 1), t = view<int64_t>(dst, "dst", 1),
               ro = view<int64_t>(router_of, "router_of", 1);
    const auto amt = view<double>(amount, "amount", 1), uc = view<double>(up_cap, "up_cap", 1),
               dc = view<double>(down_cap, "down_cap", 1), ul = view<double>(up_lat, "up_lat", 1),
               dl = view<double>(down_lat, "down_lat", 1);
    const auto lf = view<uint8_t>(leaf, "leaf", 1);
    const int64_t flows = s.shape[0], devices = ro.shape[0];
    same_length(t, flows, "dst", "flow");
    same_length(amt, flows, "amount", "flow");
    for (const auto* a : {&uc, &dc, &ul, &dl}) same_length(*a, devices, "access link attributes", "device");
    same_length(lf, devices, "leaf", "device");
    if (mode < 0 || mode > 2) throw py::value_error("mode: must be 0 (every device a leaf), 1 (none) or 2 (some)");
    if (routers < 1) throw py::value_error("routers: must be positive");
    if (nlabels < 1) throw py::value_error("nlabels: must be positive");
    nest::ArrayView<int64_t> lab;
    const int64_t* labels = optional_labels(label, flows, lab);
    nest::AccessLinks acc;
    acc.leaf = lf.data;
    acc.up_cap = uc.data;
    acc.down_cap = dc.data;
    acc.up_lat = ul.data;
    acc.down_lat = dl.data;
    acc.router_of = ro.data;
    acc.devices = devices;
    acc.routers = routers;
    acc.mode = mode;
    py::array_t<double> ratio(static_cast<py::ssize_t>(nlabels)), access_lat(static_cast<py::ssize_t>(flows));
    py::array_t<int64_t> inverse(static_cast<py::ssize_t>(flows));
    double* r = ratio.mutable_data();
    double* al = access_lat.mutable_data();
    int64_t* inv = inverse.mutable_data();
    nest::RouterPairs pairs;
    std::string error;
    {
        py::gil_scoped_release release;
        try {
            nest::route_pairs(acc, s.data, t.data, amt.data, labels, flows, nlabels, r, al, inv, pairs);
        } catch (const std::exception& e) {
            error = e.what();
        }
    }
    if (!error.empty()) throw py::value_error(error);
    return py::make_tuple(ratio, access_lat, inverse, vector_to_numpy(pairs.source), vector_to_numpy(pairs.target),
                          vector_to_numpy(pairs.amount), vector_to_numpy(pairs.label));
}

py::array_t<double> route_latency(const py::object& label, const py::object& access_lat, const py::object& inverse,
                                  const py::object& pair_lat, int64_t nlabels) {
    const auto al = view<double>(access_lat, "access_lat", 1), pl = view<double>(pair_lat, "pair_lat", 1);
    const auto inv = view<int64_t>(inverse, "inverse", 1);
    const int64_t flows = al.shape[0];
    same_length(inv, flows, "inverse", "flow");
    if (nlabels < 1) throw py::value_error("nlabels: must be positive");
    nest::ArrayView<int64_t> lab;
    const int64_t* labels = optional_labels(label, flows, lab);
    py::array_t<double> out(static_cast<py::ssize_t>(nlabels));
    double* latency = out.mutable_data();
    std::string error;
    {
        py::gil_scoped_release release;
        try {
            nest::route_latency(labels, al.data, inv.data, flows, pl.data, pl.shape[0], nlabels, latency);
        } catch (const std::exception& e) {
            error = e.what();
        }
    }
    if (!error.empty()) throw py::value_error(error);
    return out;
}

py::array_t<double> dijkstra_rows(const py::object& indptr, const py::object& indices, const py::object& data,
                                  const py::object& sources) {
    const auto p = view<int32_t>(indptr, "indptr", 1), i = view<int32_t>(indices, "indices", 1);
    const auto w = view<double>(data, "data", 1);
    const auto s = view<int64_t>(sources, "sources", 1);
    if (p.shape[0] < 1) throw py::value_error("indptr: empty");
    same_length(w, i.shape[0], "data", "link");
    nest::CsrGraph g;
    g.n = p.shape[0] - 1;
    g.indptr = p.data;
    g.indices = i.data;
    g.data = w.data;
    g.nnz = i.shape[0];
    const int64_t count = s.shape[0];
    py::array_t<double> out({static_cast<py::ssize_t>(count), static_cast<py::ssize_t>(g.n)});
    double* dist = out.mutable_data();
    std::string error;
    {
        py::gil_scoped_release release;
        try {
            nest::dijkstra_rows(g, s.data, count, dist);
        } catch (const std::exception& e) {
            error = e.what();
        }
    }
    if (!error.empty()) throw py::value_error(error);
    return out;
}

py::array_t<int64_t> nn_chain_codes(const py::object& codes) {
    const auto c = view<uint8_t>(codes, "codes", 2);
    const int64_t n = c.shape[0];
    if (c.shape[1] != n) throw py::value_error("codes: must be square");
    py::array_t<int64_t> out({static_cast<py::ssize_t>(n > 0 ? n - 1 : 0), static_cast<py::ssize_t>(3)});
    int64_t* z = out.mutable_data();
    auto* data = static_cast<uint8_t*>(py::reinterpret_borrow<py::array>(codes).mutable_data());
    std::string error;
    {
        py::gil_scoped_release release;
        try {
            nest::nn_chain_codes(data, n, z);
        } catch (const std::exception& e) {
            error = e.what();
        }
    }
    if (!error.empty()) throw py::value_error(error);
    return out;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
    m.doc() = "nest's compiled stage DP, pipeline schedule and routing kernels (private; use nest.dp.engine and "
            "nest.network.kernels).";
    m.def("solve", &solve, py::arg("time_ps"), py::arg("params"), py::arg("mem_params"), py::arg("act_bytes"), py::arg("send_ps"),
          py::arg("cand_config"), py::arg("cand_scale"), py::arg("cand_offset"), py::arg("cand_head_scale"), py::arg("cand_mem_fixed"), py::arg("cand_mem_per_param"),
          py::arg("cand_g0"), py::arg("cand_g1"), py::arg("cand_lower_bound"), py::arg("pos_offset"),
          py::arg("pos_inflight"), py::arg("pos_mem_fixed"), py::arg("pos_tier"), py::arg("capacity"), py::arg("threads") = 0,
          py::arg("host_params") = py::none(), py::arg("cand_host_per_param") = py::none(),
          py::arg("host_capacity") = 0.0,
          "Solve every candidate of a DPProblem's arrays; returns (status, objective, max_time, max_params,\n"
          "ends, best). threads <= 0 uses the OpenMP default. Raises ValueError on bad input.");
    m.def("pipeline_finish", &pipeline_finish, py::arg("pp"), py::arg("vp"), py::arg("micro_batches"),
          py::arg("forward"), py::arg("recompute"), py::arg("backward"), py::arg("send_forward"),
          py::arg("send_backward"), py::arg("extra_warmup") = 0,
          "Per pipeline rank, when its last task of Megatron-LM's (interleaved) 1F1B schedule ends;\n"
          "per-virtual-stage times in seconds (float64). Raises ValueError on bad input.");
    m.def("shortest_path_dags", &shortest_path_dags, py::arg("dist"), py::arg("row"), py::arg("source"),
          py::arg("target"), py::arg("in_ptr"), py::arg("eu"), py::arg("ev"), py::arg("ecost"), py::arg("elat"),
          py::arg("mul_tail"), py::arg("mul_head"),
          "Shortest-path DAGs of router pairs with their ECMP shares: (counts, links, fracs, lats)\n"
          "(nest.network.paths.compute_dags). Raises ValueError on bad input.");
    m.def("label_ratios", &label_ratios, py::arg("ptr"), py::arg("edge"), py::arg("frac"), py::arg("ids"),
          py::arg("amount"), py::arg("label"), py::arg("nlabels"), py::arg("capacity"),
          py::arg("cell") = py::none(), py::arg("shift") = py::none(), py::arg("cell_link") = py::none(),
          "Per label, the largest load / capacity of a link under concurrent flows over stored DAGs\n"
          "(nest.network.paths._ratios). Raises ValueError on bad input.");
    m.def("route_pairs", &route_pairs, py::arg("src"), py::arg("dst"), py::arg("amount"), py::arg("label"),
          py::arg("nlabels"), py::arg("leaf"), py::arg("up_cap"), py::arg("down_cap"), py::arg("up_lat"),
          py::arg("down_lat"), py::arg("router_of"), py::arg("routers"), py::arg("mode"),
          "The access-link ratios per label and the router pairs of a set of flows: (ratio, access_lat,\n"
          "inverse, source, target, amount, label) (nest.network.routing.route). Raises ValueError on bad input.");
    m.def("route_latency", &route_latency, py::arg("label"), py::arg("access_lat"), py::arg("inverse"),
          py::arg("pair_lat"), py::arg("nlabels"),
          "Per label, the longest latency of its flows (nest.network.routing.route). Raises ValueError on bad input.");
    m.def("dijkstra_rows", &dijkstra_rows, py::arg("indptr"), py::arg("indices"), py::arg("data"), py::arg("sources"),
          "Least path weights from each source over a CSR graph (scipy.sparse.csgraph.dijkstra's floats),\n"
          "[sources, n] float64. Raises ValueError on bad input.");
    m.def("nn_chain_codes", &nn_chain_codes, py::arg("codes"),
          "Complete-linkage nearest-neighbour chain on byte codes of distances (overwritten): [(x, y, code)]\n"
          "per merge in chain order (nest.network.linkage). Raises ValueError on bad input.");
    m.def("has_openmp", &nest::has_openmp, "Whether the core was compiled with OpenMP.");
    m.def("max_threads", &nest::max_threads, "Default thread count of the core (1 without OpenMP).");
    m.def("default_threads", &nest::default_threads, py::arg("work"),
          "Threads solve() uses by default on a batch of `work` DP cells (1 for small batches).");
}
