// Routing kernels of nest.network (python/nest/network/paths.py): shortest-path DAGs of
// router pairs with their ECMP shares, and the link loads of sets of concurrent flows.
//
// Both return exactly the floats of the numpy code they replace (paths.compute_dags and
// paths._ratios): every sum is taken in the same order (the file is built with
// -ffp-contract=off, so no fused multiply-add changes a rounding).
#pragma once

#include <cstdint>
#include <vector>

namespace nest {

// A compiled graph's router-level links, sorted by head (in_ptr[v] .. in_ptr[v + 1] are
// the links into router v), and the distance rows of the sources (float32, [rows, nr]).
struct DagGraph {
    const float* dist = nullptr;  // [rows, nr] min-cost distances from each row's source
    int64_t rows = 0;
    int64_t nr = 0;                 // routers
    const int64_t* in_ptr = nullptr;  // [nr + 1]
    const int64_t* eu = nullptr;      // [links] tail router
    const int64_t* ev = nullptr;      // [links] head router
    const double* ecost = nullptr;    // [links] routing cost (compared as float32)
    const double* elat = nullptr;     // [links] latency
    const double* mul_tail = nullptr;  // [links] twins the tail stands for
    const double* mul_head = nullptr;  // [links] twins the head stands for
    int64_t links = 0;
};

struct Dags {
    std::vector<int64_t> counts;  // per pair: DAG links
    std::vector<int64_t> links;   // pair after pair, ascending within a pair
    std::vector<double> fracs;    // each link's share of the pair's traffic
    std::vector<double> lats;     // per pair: the longest latency of a shortest path
};

// The DAGs of the pairs source[i] -> target[i] (source[i] != target[i], the source's
// distances in row row[i]). Throws std::invalid_argument on an out-of-range index or an
// unreachable target.
void shortest_path_dags(const DagGraph& g, const int64_t* row, const int64_t* source, const int64_t* target,
                        int64_t n, Dags& out);

// Stored DAG entries (pair p's entries: ptr[p] .. ptr[p + 1]) and, optionally, the
// translation that moves a canonical DAG's link onto a flow's (tori): the link of entry
// e for flow f is cell_link[cell[e] + shift[f]] when cell is given, edge[e] otherwise.
struct DagEntries {
    const int64_t* ptr = nullptr;
    int64_t pairs = 0;
    const int32_t* edge = nullptr;
    const double* frac = nullptr;
    int64_t entries = 0;
    const int32_t* cell = nullptr;       // [entries] or null (4 bytes: less to stream per entry)
    const int64_t* shift = nullptr;      // [flows] when cell is given
    const int32_t* cell_link = nullptr;  // [cells] when cell is given
    int64_t cells = 0;
};

// Per label, max over links of load / capacity (0 when nothing is loaded): flow f (of
// label[f], ascending) adds frac[e] * amount[f] to the load of each entry e of its pair
// ids[f], entry after entry in flow order. Throws std::invalid_argument on bad input.
void label_ratios(const DagEntries& dags, const int64_t* ids, const double* amount, const int64_t* label,
                  int64_t flows, int64_t nlabels, const double* capacity, int64_t links, double* ratio);

// The devices' access links (nest.network.compiled.CompiledGraph): a device that hangs off
// a switch (leaf[d] != 0) reaches its router router_of[d] over one link up and one down;
// the others are routers themselves. mode: 0 every device is a leaf, 1 none, 2 some.
struct AccessLinks {
    const uint8_t* leaf = nullptr;
    const double* up_cap = nullptr;
    const double* down_cap = nullptr;
    const double* up_lat = nullptr;
    const double* down_lat = nullptr;
    const int64_t* router_of = nullptr;
    int64_t devices = 0;
    int64_t routers = 0;
    int mode = 0;
};

// The router pairs of a set of flows, one per distinct (label, source router, target
// router) in ascending order, with the sum of their flows' amounts (flow order).
struct RouterPairs {
    std::vector<int64_t> source, target, label;
    std::vector<double> amount;
};

// The part of nest.network.routing.route before the routers' pairs are priced, the same
// floats: flow f (device src[f] -> dst[f], label[f] or 0 without labels) of
// amount[f]. Per label, ratio = the largest load / capacity of an access link (0 when
// none is loaded); per flow, access_lat (its access links' latency) and inverse (its
// pair in `pairs`, -1 when its ends share a router, -2 when src == dst: it moves
// nothing). Throws std::invalid_argument on an out-of-range index.
void route_pairs(const AccessLinks& acc, const int64_t* src, const int64_t* dst, const double* amount,
                 const int64_t* label, int64_t flows, int64_t nlabels, double* ratio, double* access_lat,
                 int64_t* inverse, RouterPairs& pairs);

// Per label, the longest latency of its flows (0 when none moves): access_lat[f] plus its
// pair's pair_lat when inverse[f] >= 0 (route_pairs' arrays). Throws
// std::invalid_argument on an out-of-range index.
void route_latency(const int64_t* label, const double* access_lat, const int64_t* inverse, int64_t flows,
                   const double* pair_lat, int64_t pairs, int64_t nlabels, double* latency);

}  // namespace nest
