// The exact stage DP; see stage_dp.hpp for the problem and python/nest/dp_reference.py
// for the oracle this must match bit for bit.
//
// Must be compiled without floating-point contraction (-ffp-contract=off) and without
// -ffast-math: the memory test and G(w) are evaluated in IEEE double exactly in the
// order Python evaluates them.
//
// Exactness of the fast feasibility test check(Tcap, Wcap)
// ---------------------------------------------------------
// Stage k of a split takes nodes [i, j). It is *allowed* iff
//   (a) W(i,j) = PW[j] - PW[i] <= Wcap,
//   (b) mem_fixed + pos_fixed_k + mem_per_param * W(i,j) + inflight_k * A(i,j) <= capacity
//       and host_per_param * H(i,j) <= host_capacity (offloaded optimizer state),
//   (c) T_k(i,j) = PT[j] - PT[i] + fwd_k(j) + bwd_k(i) <= Tcap,
// with fwd_k(j) = send[tier_k][j-1] (k < p-1, else 0) and bwd_k(i) = send[tier_{k-1}][i-1]
// (k > 0, else 0). (a) and (b) are monotone under segment inclusion: W and A are sums of
// non-negative integers (H too), int64 -> double conversion, multiplication by a non-negative
// double and double addition are all monotone (IEEE rounding is monotone). So for fixed
// k and j the starts i satisfying (a) and (b) form an interval [lo_k(j), j-1] (possibly
// empty) and lo_k(j) is non-decreasing in j. (c) separates exactly in int64:
//   u_k(i) := PT[i] - bwd_k(i)  >=  PT[j] + fwd_k(j) - Tcap,
// and no term overflows under the precondition of stage_dp.hpp (all stage times
// <= Tbound < INT64_MAX, 0 <= Tcap <= INT64_MAX). Hence, with reach[k][j] = "nodes [0,j)
// split into stages 0..k, all allowed",
//   reach[k][j] = max{ u_k(i) : lo_k(j) <= i < j, reach[k-1][i] } >= PT[j]+fwd_k(j)-Tcap,
// a sliding-window maximum whose both ends move right: a monotone deque, O(L) per k.
// The split exists iff reach[p-1][L]. minT(Wcap) (the smallest t with check(t, Wcap)) is
// the min-max stage time of dp_reference.min_time because check is monotone in Tcap;
// likewise minW(Tcap) for min_params. Both are found by integer bisection in which a
// feasible check lowers the upper end to the max T (W) of the split it found, and an
// infeasible one raises the lower end to the next value at which its outcome can change
// (see check() below); this only skips values that bisection would reject too.
//
// Reconstruction mirrors the sweep backwards: completes[k][i] = "nodes [i,L) split into
// stages k..p-1, all allowed". For fixed k and i the ends j satisfying (a),(b) form
// [i+1, hi_k(i)] with hi_k(i) non-decreasing in i, and (c) reads
//   v_k(j) := PT[j] + fwd_k(j)  <=  Tcap - bwd_k(i) + PT[i]
// (evaluated as min v - PT[i] <= Tcap - bwd_k(i), both sides free of overflow), a sliding
// window minimum over i descending. The greedy smallest next end with completes[k+1][j]
// then yields dp_reference.lexicographic_ends.

#include "stage_dp.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>

#ifdef NEST_HAVE_OPENMP
#include <omp.h>
#endif

namespace nest {

namespace {

// A literal message is only turned into a string when the check fails: these run in
// per-element loops over the tables.
void require(bool ok, const char* message) {
    if (!ok) throw std::invalid_argument(message);
}

void require(bool ok, const std::string& message) {
    if (!ok) throw std::invalid_argument(message);
}

template <class T>
void require_shape(const ArrayView<T>& a, const char* name, int ndim) {
    require(a.ndim == ndim, std::string(name) + " must have " + std::to_string(ndim) +
                                " dimensions, got " + std::to_string(a.ndim));
    for (int d = 0; d < ndim; ++d)
        require(a.shape[d] >= 0, std::string(name) + " has a negative extent");
    require(a.data != nullptr || a.size() == 0, std::string(name) + " has no data");
}

template <class T>
void require_length(const ArrayView<T>& a, const char* name, int64_t n, const char* what) {
    require(a.shape[0] == n, std::string(name) + " must have " + what);
}

// Prefix sums of one layer-config table and the bound on any stage time.
struct ConfigTables {
    std::vector<int64_t> prefix_time, prefix_params, prefix_act, prefix_mem, prefix_host;  // [C * (L + 1)]
    std::vector<int64_t> time_bound;  // Tbound[c] = PT[L] + 2 * max(send[c])
    std::vector<int64_t> max_time_node, max_params_node;  // max over single nodes
};

bool add_overflows(int64_t a, int64_t b, int64_t* out) { return __builtin_add_overflow(a, b, out); }

// Builds the prefix sums; throws if any sum (or the time bound + 1) overflows int64.
ConfigTables build_tables(const Problem& pb) {
    const int64_t C = pb.time_ps.shape[0], L = pb.time_ps.shape[1], NT = pb.send_ps.shape[1];
    ConfigTables t;
    t.prefix_time.assign(C * (L + 1), 0);
    t.prefix_params.assign(C * (L + 1), 0);
    t.prefix_act.assign(C * (L + 1), 0);
    t.prefix_mem.assign(C * (L + 1), 0);
    t.prefix_host.assign(C * (L + 1), 0);
    t.time_bound.assign(C, 0);
    t.max_time_node.assign(C, 0);
    t.max_params_node.assign(C, 0);
    for (int64_t c = 0; c < C; ++c) {
        const int64_t* tp = pb.time_ps.data + c * L;
        const int64_t* pp = pb.params.data + c * L;
        const int64_t* ap = pb.act_bytes.data + c * L;
        const int64_t* mp = pb.mem_params.data + c * L;
        int64_t* PM = t.prefix_mem.data() + c * (L + 1);
        const int64_t* hp = pb.host_params.data + c * L;
        int64_t* PH = t.prefix_host.data() + c * (L + 1);
        int64_t* PT = t.prefix_time.data() + c * (L + 1);
        int64_t* PW = t.prefix_params.data() + c * (L + 1);
        int64_t* PA = t.prefix_act.data() + c * (L + 1);
        for (int64_t i = 0; i < L; ++i) {
            require(!add_overflows(PT[i], tp[i], &PT[i + 1]), "sum of time_ps overflows int64");
            require(!add_overflows(PW[i], pp[i], &PW[i + 1]), "sum of params overflows int64");
            require(!add_overflows(PA[i], ap[i], &PA[i + 1]), "sum of act_bytes overflows int64");
            require(!add_overflows(PM[i], mp[i], &PM[i + 1]), "sum of mem_params overflows int64");
            require(!add_overflows(PH[i], hp[i], &PH[i + 1]), "sum of host_params overflows int64");
            t.max_time_node[c] = std::max(t.max_time_node[c], tp[i]);
            t.max_params_node[c] = std::max(t.max_params_node[c], pp[i]);
        }
        int64_t max_send = 0;
        const int64_t* sp = pb.send_ps.data + c * NT * L;
        for (int64_t i = 0; i < NT * L; ++i) max_send = std::max(max_send, sp[i]);
        int64_t bound = 0, bound1 = 0;
        require(!add_overflows(PT[L], max_send, &bound) && !add_overflows(bound, max_send, &bound) &&
                    !add_overflows(bound, 1, &bound1),
                "stage times (sum of time_ps + 2 * max send_ps) overflow int64");
        t.time_bound[c] = bound;
    }
    return t;
}

// G(w) as a double before flooring; sync_time converts it.
double sync_time_double(double g0, double g1, int64_t params) {
    return std::floor(g0 + g1 * static_cast<double>(params) + 0.5);
}

constexpr double kTwo63 = 9223372036854775808.0;

void check_values(const Problem& pb) {
    require_shape(pb.time_ps, "time_ps", 2);
    require_shape(pb.params, "params", 2);
    require_shape(pb.mem_params, "mem_params", 2);
    require_shape(pb.act_bytes, "act_bytes", 2);
    require_shape(pb.send_ps, "send_ps", 3);
    require_shape(pb.cand_config, "cand_config", 1);
    require_shape(pb.cand_scale, "cand_scale", 1);
    require_shape(pb.cand_offset, "cand_offset", 1);
    require_shape(pb.cand_head_scale, "cand_head_scale", 1);
    require_shape(pb.cand_mem_fixed, "cand_mem_fixed", 1);
    require_shape(pb.cand_mem_per_param, "cand_mem_per_param", 1);
    require_shape(pb.cand_g0, "cand_g0", 1);
    require_shape(pb.cand_g1, "cand_g1", 1);
    require_shape(pb.cand_lower_bound, "cand_lower_bound", 1);
    require_shape(pb.pos_offset, "pos_offset", 1);
    require_shape(pb.pos_inflight, "pos_inflight", 1);
    require_shape(pb.pos_mem_fixed, "pos_mem_fixed", 1);
    require_shape(pb.pos_tier, "pos_tier", 1);
    require_shape(pb.host_params, "host_params", 2);
    require_shape(pb.cand_host_per_param, "cand_host_per_param", 1);

    const int64_t C = pb.time_ps.shape[0], L = pb.time_ps.shape[1];
    require(pb.params.shape[0] == C && pb.params.shape[1] == L && pb.act_bytes.shape[0] == C &&
                pb.act_bytes.shape[1] == L && pb.mem_params.shape[0] == C && pb.mem_params.shape[1] == L,
            "params, mem_params and act_bytes must have the shape of time_ps");
    require(pb.host_params.shape[0] == C && pb.host_params.shape[1] == L,
            "host_params must have the shape of time_ps");
    require(pb.send_ps.shape[0] == C && pb.send_ps.shape[2] == L,
            "send_ps must have shape [configs, tiers, nodes]");
    const int64_t N = pb.cand_config.shape[0];
    const char* per_cand = "one entry per candidate";
    require_length(pb.cand_scale, "cand_scale", N, per_cand);
    require_length(pb.cand_offset, "cand_offset", N, per_cand);
    require_length(pb.cand_head_scale, "cand_head_scale", N, per_cand);
    require_length(pb.cand_mem_fixed, "cand_mem_fixed", N, per_cand);
    require_length(pb.cand_mem_per_param, "cand_mem_per_param", N, per_cand);
    require_length(pb.cand_g0, "cand_g0", N, per_cand);
    require_length(pb.cand_g1, "cand_g1", N, per_cand);
    require_length(pb.cand_lower_bound, "cand_lower_bound", N, per_cand);
    require_length(pb.cand_host_per_param, "cand_host_per_param", N, per_cand);
    require(pb.pos_offset.shape[0] == N + 1 && pb.pos_offset.data[0] == 0,
            "pos_offset must have candidates + 1 entries starting at 0");
    const int64_t total = pb.pos_offset.data[N];
    require(pb.pos_inflight.shape[0] == total && pb.pos_tier.shape[0] == total &&
                pb.pos_mem_fixed.shape[0] == total,
            "pos_inflight, pos_mem_fixed and pos_tier must have pos_offset[-1] entries");
    require(L > 0, "the layer chain is empty");
    require(L < INT32_MAX, "too many nodes");

    auto non_negative = [](const ArrayView<int64_t>& a, const char* name) {
        const int64_t n = a.size();
        for (int64_t i = 0; i < n; ++i)
            if (a.data[i] < 0) require(false, std::string(name) + " must be non-negative");
    };
    non_negative(pb.time_ps, "time_ps");
    non_negative(pb.params, "params");
    non_negative(pb.mem_params, "mem_params");
    non_negative(pb.act_bytes, "act_bytes");
    non_negative(pb.send_ps, "send_ps");
    non_negative(pb.host_params, "host_params");
    auto finite_non_negative = [](const ArrayView<double>& a, const char* name) {
        const int64_t n = a.size();
        for (int64_t i = 0; i < n; ++i)
            if (!(std::isfinite(a.data[i]) && a.data[i] >= 0))
                require(false, std::string(name) + " must be finite and non-negative");
    };
    finite_non_negative(pb.cand_mem_fixed, "cand_mem_fixed");
    finite_non_negative(pb.cand_mem_per_param, "cand_mem_per_param");
    finite_non_negative(pb.cand_g0, "cand_g0");
    finite_non_negative(pb.cand_g1, "cand_g1");
    finite_non_negative(pb.pos_inflight, "pos_inflight");
    finite_non_negative(pb.pos_mem_fixed, "pos_mem_fixed");
    finite_non_negative(pb.cand_host_per_param, "cand_host_per_param");
    require(std::isfinite(pb.capacity), "capacity must be finite");
    require(std::isfinite(pb.host_capacity), "host_capacity must be finite");
    for (int64_t n = 0; n < N; ++n)
        require(pb.cand_config.data[n] >= 0 && pb.cand_config.data[n] < C, "cand_config out of range");
    for (int64_t n = 0; n < N; ++n) require(pb.cand_scale.data[n] >= 0, "cand_scale must be non-negative");
    for (int64_t n = 0; n < N; ++n) require(pb.cand_offset.data[n] >= 0, "cand_offset must be non-negative");
    for (int64_t n = 0; n < N; ++n)
        require(pb.cand_head_scale.data[n] >= 0, "cand_head_scale must be non-negative");
    for (int64_t n = 0; n < N; ++n)
        require(pb.cand_lower_bound.data[n] >= 0, "cand_lower_bound must be non-negative");
    for (int64_t n = 0; n < N; ++n) {
        // pos_offset[n] >= 0 by induction (pos_offset[0] == 0), so once stop > start the
        // difference cannot overflow, whatever pos_offset[n + 1] holds.
        const int64_t start = pb.pos_offset.data[n], stop = pb.pos_offset.data[n + 1];
        require(stop > start && stop - start <= L, "every candidate needs 1 <= stages <= nodes");
    }
    // Offsets are now strictly increasing from 0 to total.
    const int64_t NT = pb.send_ps.shape[1];
    for (int64_t n = 0; n < N; ++n)
        for (int64_t q = pb.pos_offset.data[n]; q + 1 < pb.pos_offset.data[n + 1]; ++q)
            require(pb.pos_tier.data[q] >= 0 && pb.pos_tier.data[q] < NT, "pos_tier out of range");
}

void check_precondition(const Problem& pb, const ConfigTables& tables) {
    const int64_t L = pb.time_ps.shape[1], N = pb.cand_config.shape[0];
    for (int64_t n = 0; n < N; ++n) {
        const int64_t c = pb.cand_config.data[n];
        const int64_t w_total = tables.prefix_params[c * (L + 1) + L];
        const double g = sync_time_double(pb.cand_g0.data[n], pb.cand_g1.data[n], w_total);
        require(g < kTwo63, "sync time G(sum of params) overflows int64");
        int64_t scales = 0, scaled = 0, shifted = 0, objective = 0;
        require(!add_overflows(pb.cand_scale.data[n], pb.cand_head_scale.data[n], &scales) &&
                    !__builtin_mul_overflow(scales, tables.time_bound[c] + 1, &scaled) &&
                    !add_overflows(scaled, pb.cand_offset.data[n], &shifted) &&
                    !add_overflows(shifted, static_cast<int64_t>(g), &objective),
                "objective bound (scale + head_scale) * (time bound + 1) + offset + G(sum of params) "
                "overflows int64");
    }
}

// Per-thread workspace solving one candidate at a time.
class CandidateSolver {
  public:
    CandidateSolver(const Problem& pb, const ConfigTables& tables)
        : pb_(pb), tables_(tables), L_(pb.time_ps.shape[1]) {
        reach_prev_.resize(L_ + 1);
        reach_cur_.resize(L_ + 1);
        wlo_.resize(L_ + 1);
        dq_idx_.resize(L_ + 1);
        dq_val_.resize(L_ + 1);
    }

  private:
    struct Floors;  // below, after Check

  public:
    // Fills objective, max_time, max_params and ends (p entries); false if infeasible.
    bool solve(int64_t n, int64_t* objective, int64_t* max_time, int64_t* max_params, int64_t* ends) {
        load(n);
        Floors f;
        f.any_split = check(kInf, kInf, w_total_, kInf, kInf, w_total_);
        if (!f.any_split.ok) return false;
        int64_t unused = 0;
        f.w_floor = search_params(kInf, kInf, w_base_, f.any_split.params, &unused);
        f.w_lo = std::max(w_base_, f.w_floor);  // minW(t) >= w_floor for every t
        f.g_floor = offset_ + sync_time(g0_, g1_, f.w_floor);
        if (split_last_) solve_split_last(f, objective, max_time, max_params, ends);
        else solve_max(f, objective, max_time, max_params, ends);
        return true;
    }

  private:

    // head_scale == 0: the Pareto walk of dp_reference.solve_candidate over (max T, max W);
    // only the searches differ.
    void solve_max(const Floors& f, int64_t* objective, int64_t* max_time, int64_t* max_params, int64_t* ends) {
        const Check& any_split = f.any_split;
        const int64_t w_floor = f.w_floor, w_lo = f.w_lo, g_floor = f.g_floor;
        int64_t unused = 0;
        bool have = false;
        int64_t best_obj = 0, best_t = 0, best_w = 0;
        int64_t w_cap = w_total_;
        int64_t t_lo = t_base_;
        while (true) {
            // t = minT(w_cap); w_cap >= w_floor, so it exists.
            const Check top = w_cap == w_total_ ? any_split : check(kInf, kInf, w_cap, kInf, kInf, w_cap);
            if (!top.ok) throw std::logic_error("stage DP: no split above w_floor");
            int64_t w_hi = top.params;
            const int64_t t = search_time(w_cap, kInf, t_lo, top.time, &w_hi);
            // w = minW(t); check(t, w_hi) holds.
            const int64_t w = search_params(t, t, w_lo, w_hi, &unused);
            const int64_t obj = scale_ * t + offset_ + sync_time(g0_, g1_, w);
            if (!have || obj < best_obj) {
                have = true;
                best_obj = obj;
                best_t = t;
                best_w = w;
            }
            w_cap = w - 1;
            if (scale_ * (t + 1) + g_floor >= best_obj) break;
            if (w_cap < w_floor) break;  // minT(w_cap) is infeasible: the reference stops too
            t_lo = t + 1;                // check(t, w - 1) is false, so the next t > t
        }
        if (!have) throw std::logic_error("stage DP: feasible candidate without a Pareto point");
        *objective = best_obj;
        *max_time = best_t;
        *max_params = best_w;
        reconstruct(best_t, best_t, best_w, ends);
    }

    // head_scale > 0: objective head_scale * H + scale * max(H, T_last) + offset + G(W),
    // H = the slowest stage before the last one. Optimum: the key (F, H, W, T_last, ends).
    //
    // For a cap tau on the last stage, the walk of solve_max over (H, W) lists the Pareto
    // points of the splits with T_last <= tau, and each point's smallest T_last is the
    // last stage of the split check() returns (it takes the start with the largest u).
    // Lowering tau to lambda - 1, lambda = the largest T_last > H among those points,
    // keeps every listed point with T_last < lambda on the front of the smaller feasible
    // set; points with T_last <= H cannot be beaten by splits they dominate in (H, W)
    // (F = (head_scale + scale) H + G(W) there). So the key-optimal split is listed under
    // the last tau >= its T_last. Pruning, all against a first incumbent (the split with
    // the smallest slowest stage): a walk stops once (head_scale + scale) H + G(W floor)
    // can only tie with a larger H, the search once the walk's first H, t0, does (t0 only
    // grows as tau falls); and tau skips every T_last > t0 with head_scale t0 + scale
    // T_last + G(W floor) above the incumbent without walking.
    void solve_split_last(const Floors& f, int64_t* objective, int64_t* max_time, int64_t* max_params,
                          int64_t* ends) {
        const int64_t w_floor = f.w_floor, w_lo = f.w_lo, g_floor = f.g_floor;
        int64_t unused = 0;
        const int64_t both = scale_ + head_scale_;
        bool have = false;
        int64_t best_obj = 0, best_t = 0, best_w = 0, best_l = 0;
        auto record = [&](int64_t t, int64_t l, int64_t w) {
            const int64_t obj = head_scale_ * t + scale_ * std::max(t, l) + offset_ + sync_time(g0_, g1_, w);
            if (!have || obj < best_obj ||
                (obj == best_obj && (t < best_t || (t == best_t && (w < best_w || (w == best_w && l < best_l)))))) {
                have = true;
                best_obj = obj;
                best_t = t;
                best_w = w;
                best_l = l;
            }
        };
        auto loses = [&](int64_t t) {
            const int64_t floor = both * t + g_floor;
            return floor > best_obj || (floor == best_obj && t > best_t);
        };
        {
            // The first incumbent: a split whose slowest stage (the last one included) is
            // as fast as any split's, found by the searches of solve_max.
            split_last_ = false;
            const Check any_common = check(kInf, kInf, w_total_, kInf, kInf, w_total_);
            int64_t w_any = any_common.params;
            const int64_t t_common = search_time(w_total_, kInf, t_base_, any_common.time, &w_any);
            split_last_ = true;
            const Check seed = check(t_common, t_common, w_total_, t_common, t_common, w_total_);
            if (!seed.ok) throw std::logic_error("stage DP: no split at the smallest slowest stage");
            record(seed.time, seed.last, seed.params);
        }
        int64_t tau = kInf;
        while (true) {
            const Check under_tau = check(kInf, tau, w_total_, kInf, tau, w_total_);
            if (!under_tau.ok) break;
            int64_t w_hi = under_tau.params;
            int64_t t = search_time(w_total_, tau, 0, under_tau.time, &w_hi);
            if (loses(t)) break;
            if (scale_ > 0 && tau > t) {
                // T_last in (skip, tau]: F >= head_scale t + scale T_last + G(W floor) > best
                const int64_t room = best_obj - g_floor - head_scale_ * t;
                const int64_t skip = std::max(room < 0 ? int64_t(-1) : room / scale_, t);
                if (skip < tau) {
                    tau = skip;
                    continue;
                }
            }
            int64_t lambda = -1;
            while (true) {
                // (t, w) is the next Pareto point under tau; check(t, tau, w_hi) holds.
                const int64_t w = search_params(t, tau, w_lo, w_hi, &unused);
                const Check at = check(t, tau, w, t, tau, w);
                if (!at.ok) throw std::logic_error("stage DP: Pareto point without a split");
                record(t, at.last, w);
                if (at.last > t) lambda = std::max(lambda, at.last);
                if (loses(t + 1)) break;
                const int64_t w_cap = w - 1;
                if (w_cap < w_floor) break;
                const Check top = check(kInf, tau, w_cap, kInf, tau, w_cap);
                if (!top.ok) break;  // W below the floor of the splits under tau
                w_hi = top.params;
                t = search_time(w_cap, tau, t + 1, top.time, &w_hi);
            }
            if (lambda < 0) break;
            tau = lambda - 1;
        }
        *objective = best_obj;
        *max_time = std::max(best_t, best_l);
        *max_params = best_w;
        reconstruct(best_t, best_l, best_w, ends);
    }

    void load(int64_t n) {
        const int64_t c = pb_.cand_config.data[n];
        const int64_t start = pb_.pos_offset.data[n];
        p_ = pb_.pos_offset.data[n + 1] - start;
        PT_ = tables_.prefix_time.data() + c * (L_ + 1);
        PW_ = tables_.prefix_params.data() + c * (L_ + 1);
        PA_ = tables_.prefix_act.data() + c * (L_ + 1);
        PM_ = tables_.prefix_mem.data() + c * (L_ + 1);
        PH_ = tables_.prefix_host.data() + c * (L_ + 1);
        send_ = pb_.send_ps.data + c * pb_.send_ps.shape[1] * L_;
        inflight_ = pb_.pos_inflight.data + start;
        pos_fixed_ = pb_.pos_mem_fixed.data + start;
        tier_ = pb_.pos_tier.data + start;
        mem_fixed_ = pb_.cand_mem_fixed.data[n];
        mem_per_param_ = pb_.cand_mem_per_param.data[n];
        capacity_ = pb_.capacity;
        host_per_param_ = pb_.cand_host_per_param.data[n];
        host_capacity_ = pb_.host_capacity;
        scale_ = pb_.cand_scale.data[n];
        offset_ = pb_.cand_offset.data[n];
        head_scale_ = pb_.cand_head_scale.data[n];
        split_last_ = head_scale_ > 0;
        g0_ = pb_.cand_g0.data[n];
        g1_ = pb_.cand_g1.data[n];
        t_bound_ = tables_.time_bound[c];
        w_total_ = PW_[L_];
        // Lower bounds: some stage holds the largest node, and the stage sums add up to
        // at least the totals.
        auto ceil_div = [](int64_t x, int64_t d) { return x / d + (x % d != 0); };
        t_base_ = std::max(tables_.max_time_node[c], ceil_div(PT_[L_], p_));
        w_base_ = std::max(tables_.max_params_node[c], ceil_div(w_total_, p_));
        // memlo[k][j]: the smallest start i <= j such that [i, j) fits in memory at
        // position k (j when none). Positions with the same inflight and fixed bytes
        // share a row.
        pred_.resize(p_ * (L_ + 1));
        jlow_.resize(p_);
        mem_row_.assign(p_, 0);
        int64_t rows = 0;
        for (int64_t k = 0; k < p_; ++k) {
            mem_row_[k] = rows;
            for (int64_t r = 0; r < k; ++r)
                if (inflight_[r] == inflight_[k] && pos_fixed_[r] == pos_fixed_[k]) {
                    mem_row_[k] = mem_row_[r];
                    break;
                }
            if (mem_row_[k] == rows) ++rows;  // a new row: fill it below
            else continue;
            memlo_.resize(rows * (L_ + 1));
            int32_t* row = memlo_.data() + mem_row_[k] * (L_ + 1);
            int64_t lo = 0;
            row[0] = 0;
            for (int64_t j = 1; j <= L_; ++j) {
                while (lo < j && !fits(k, lo, j)) ++lo;
                row[j] = static_cast<int32_t>(lo);
            }
        }
    }

    bool fits(int64_t k, int64_t i, int64_t j) const {
        const double w = static_cast<double>(PM_[j] - PM_[i]);
        const double a = static_cast<double>(PA_[j] - PA_[i]);
        const double h = static_cast<double>(PH_[j] - PH_[i]);
        return mem_fixed_ + pos_fixed_[k] + mem_per_param_ * w + inflight_[k] * a <= capacity_ &&
               host_per_param_ * h <= host_capacity_;
    }

    int64_t fwd(int64_t k, int64_t j) const { return k < p_ - 1 ? send_[tier_[k] * L_ + j - 1] : 0; }
    int64_t bwd(int64_t k, int64_t i) const { return k > 0 ? send_[tier_[k - 1] * L_ + i - 1] : 0; }

    // t_cap bounds the stages before the last one, l_cap the last.
    bool allowed(int64_t k, int64_t i, int64_t j, int64_t t_cap, int64_t l_cap, int64_t w_cap) const {
        if (PW_[j] - PW_[i] > w_cap) return false;
        if (PT_[j] - PT_[i] + fwd(k, j) + bwd(k, i) > (k == p_ - 1 ? l_cap : t_cap)) return false;
        return fits(k, i, j);
    }

    // The outcome of check(t_cap, w_cap), with what the searches can learn from it.
    //
    // With head_scale == 0 the caps of the last stage equal those of the others and
    // `time` / `next_time` cover every stage (check(t, t, w) is the check(t, w) of the
    // exactness argument); with head_scale > 0 they cover the stages before the last and
    // `last` / `next_last` the last one.
    struct Check {
        bool ok = false;
        // ok: max T (before the last stage), T of the last stage and max W of one
        // feasible split (a witness: <= the caps); its last stage is the fastest any
        // split under the caps has.
        int64_t time = 0, last = 0, params = 0;
        // !ok: check(t, l_cap, w_cap) is false for every t < next_time, check(t_cap, l,
        // w_cap) for every l < next_last and check(t_cap, l_cap, w) for every w <
        // next_params (kInf: for every value).
        int64_t next_time = kInf, next_last = kInf, next_params = kInf;
    };

    // What both walks start from: a split with no caps, the smallest max W of any split,
    // the bracket floor of the W searches and offset + G(w_floor).
    struct Floors {
        Check any_split;
        int64_t w_floor = 0, w_lo = 0, g_floor = 0;
    };

    // Can nodes [0, L) be split into p allowed stages under the caps?
    //
    // If not, the sweep also returns the next critical caps. Raising t_cap below
    // next_time = min over examined unreachable (k, j) with a non-empty window of the
    // smallest rejected stage time c_j - max u leaves every window and, by induction over
    // k, every reach row unchanged; raising w_cap below next_params = min over examined
    // unreachable (k, j) of W(wlo(j) - 1, j) (when W, not memory, bounds the window) leaves
    // every window unchanged too. Rows after an empty row, and j outside the examined
    // ranges, cannot influence reach[p-1][L] before an examined row changes.
    //
    // Suffix pruning: an end j of stage k < p-1 is used by a complete split only if the
    // R = p-1-k later stages can hold nodes [j, L): PT[L] - PT[j] <= R * Tcap and
    // PW[L] - PW[j] <= R * Wcap (stage sums are at most the caps). The sweep drops ends
    // that fail this for the looser caps (t_prune >= t_cap, w_prune >= w_cap): exact for
    // every cap pair up to them, and fixed while a search moves t_cap or w_cap below
    // them, so the next_* bounds stay valid there (the searches never look above).
    Check check(int64_t t_cap, int64_t l_cap, int64_t w_cap, int64_t t_prune, int64_t l_prune, int64_t w_prune) {
        Check out = check_split(t_cap, l_cap, w_cap, t_prune, l_prune, w_prune);
        if (!split_last_) {
            out.time = std::max(out.time, out.last);
            out.next_time = std::min(out.next_time, out.next_last);
        }
        return out;
    }

    Check check_split(int64_t t_cap, int64_t l_cap, int64_t w_cap, int64_t t_prune, int64_t l_prune,
                      int64_t w_prune) {
        Check out;
        // Locals: the byte stores below would otherwise force reloads of every member.
        const int64_t L = L_, p = p_;
        const int64_t* const PT = PT_;
        const int64_t* const PW = PW_;
        int64_t* const wlo = wlo_.data();
        int64_t* const dq_idx = dq_idx_.data();
        int64_t* const dq_val = dq_val_.data();
        // wlo[j]: the smallest i with W(i, j) <= w_cap (j when none).
        {
            int64_t lo = 0;
            wlo[0] = 0;
            for (int64_t j = 1; j <= L; ++j) {
                while (lo < j && PW[j] - PW[lo] > w_cap) ++lo;
                wlo[j] = lo;
            }
        }
        // jlow[k]: the smallest end of stage k that passes the suffix test (the last of
        // the r later stages is capped by l_prune).
        int64_t* const jlow = jlow_.data();
        {
            int64_t j = 0;
            for (int64_t k = 0; k < p; ++k) {
                const int64_t r = p - 1 - k;
                int64_t t_room = 0, w_room = 0;
                const bool t_any = r > 0 && (__builtin_mul_overflow(r - 1, t_prune, &t_room) ||
                                             add_overflows(t_room, l_prune, &t_room));
                const bool w_any = __builtin_mul_overflow(r, w_prune, &w_room);
                while (j < L && ((!t_any && PT[L] - PT[j] > t_room) || (!w_any && PW[L] - PW[j] > w_room))) ++j;
                jlow[k] = j;
            }
        }
        uint8_t* prev = reach_prev_.data();
        uint8_t* cur = reach_cur_.data();
        int64_t first = 0, last_i = 0;  // reachable ends of the previous row lie in [first, last_i]
        for (int64_t k = 0; k < p; ++k) {
            const int32_t* const mlo = memlo_.data() + mem_row_[k] * (L + 1);
            int32_t* const pred = pred_.data() + k * (L + 1);
            // bwd_k(i) = bwd_row[i] for k > 0; fwd_k(j) = fwd_row[j] for k < p - 1.
            const int64_t* const bwd_row = k > 0 ? send_ + tier_[k - 1] * L - 1 : nullptr;
            const int64_t* const fwd_row = k < p - 1 ? send_ + tier_[k] * L - 1 : nullptr;
            if (k == p - 1) {
                // Last stage: only j = L; the window is [lo, L - 1].
                const int64_t lo = std::max<int64_t>(mlo[L], wlo[L]);
                int64_t best_i = -1, best_u = 0;
                for (int64_t i = std::max(lo, first); i <= last_i && i < L; ++i) {
                    if (k > 0 && !prev[i]) continue;  // k == 0: the previous row is {0}
                    const int64_t u = PT[i] - (k > 0 ? bwd_row[i] : 0);
                    if (best_i < 0 || u >= best_u) {
                        best_i = i;
                        best_u = u;
                    }
                }
                const int64_t c = PT[L];
                if (best_i >= 0 && best_u >= c - l_cap) {
                    pred[L] = static_cast<int32_t>(best_i);
                    break;  // feasible
                }
                if (best_i >= 0) out.next_last = c - best_u;
                if (wlo[L] > mlo[L]) out.next_params = std::min(out.next_params, PW[L] - PW[wlo[L] - 1]);
                return out;
            }
            // Ends j <= first have no reachable start; starts beyond last_i do not exist;
            // ends below jlow[k] are pruned.
            const int64_t j_start = std::max({k + 1, first + 1, jlow[k]}), j_max = L - (p - 1 - k);
            int64_t head = 0, tail = 0;  // deque [head, tail): indices, u strictly decreasing
            int64_t new_first = -1, new_last = -1;
            int64_t next_time = out.next_time, next_params = out.next_params;
            // Starts below the first window's lower end would only be popped again.
            int64_t i_push = j_start <= j_max ? std::max<int64_t>(first, std::max<int64_t>(mlo[j_start], wlo[j_start])) : 0;
            for (int64_t j = j_start; j <= j_max; ++j) {
                const int64_t i_new = j - 1;
                for (; i_push <= i_new && i_push <= last_i; ++i_push) {
                    if (k > 0 && !prev[i_push]) continue;  // k == 0: prev is {0}
                    const int64_t u = PT[i_push] - (k > 0 ? bwd_row[i_push] : 0);
                    while (tail > head && dq_val[tail - 1] <= u) --tail;
                    dq_idx[tail] = i_push;
                    dq_val[tail] = u;
                    ++tail;
                }
                const int64_t lo = std::max<int64_t>(mlo[j], wlo[j]);
                while (tail > head && dq_idx[head] < lo) ++head;
                const int64_t c = PT[j] + fwd_row[j];
                if (tail > head && dq_val[head] >= c - t_cap) {
                    cur[j] = 1;
                    pred[j] = static_cast<int32_t>(dq_idx[head]);
                    if (new_first < 0) new_first = j;
                    new_last = j;
                    continue;
                }
                cur[j] = 0;
                if (tail > head) next_time = std::min(next_time, c - dq_val[head]);
                if (wlo[j] > mlo[j]) next_params = std::min(next_params, PW[j] - PW[wlo[j] - 1]);
                if (tail == head && i_new >= last_i) {
                    // No start can enter a later window: ends j' > j stay unreachable, and
                    // need W >= W(last_i, j') >= W(last_i, j + 1) to change.
                    if (j < j_max) next_params = std::min(next_params, PW[j + 1] - PW[last_i]);
                    break;
                }
            }
            out.next_time = next_time;
            out.next_params = next_params;
            if (new_first < 0) return out;
            first = new_first;
            last_i = new_last;
            // The next stage reads prev[i] only for i in [first, last_i], written above.
            std::swap(prev, cur);
        }
        // Every stage took the start with the largest u: walk that split back.
        out.ok = true;
        int64_t j = L;
        for (int64_t k = p - 1; k >= 0; --k) {
            const int64_t i = pred_[k * (L + 1) + j];
            const int64_t t = PT[j] - PT[i] + fwd(k, j) + bwd(k, i);
            if (k == p - 1) out.last = t;
            else out.time = std::max(out.time, t);
            out.params = std::max(out.params, PW[j] - PW[i]);
            j = i;
        }
        return out;
    }

    // Smallest t in [lo, hi] with check(t, w_cap), given that a split with max T = hi and
    // max W = *w_witness <= w_cap exists; *w_witness ends as the max W of a split with
    // max T = the result. Bisection whose both ends jump to the values check reports.
    // With head_scale > 0, t caps the stages before the last and l_cap the last one.
    int64_t search_time(int64_t w_cap, int64_t l_cap, int64_t lo, int64_t hi, int64_t* w_witness) {
        if (lo > hi) throw std::logic_error("stage DP: empty time bracket");
        while (lo < hi) {
            const int64_t mid = lo + (hi - lo) / 2;
            const Check r = split_last_ ? check(mid, l_cap, w_cap, hi, l_cap, w_cap) : check(mid, mid, w_cap, hi, hi, w_cap);
            if (r.ok) {
                hi = r.time;
                *w_witness = r.params;
            } else {
                lo = std::max(mid + 1, r.next_time);
            }
            if (lo > hi) throw std::logic_error("stage DP: time bisection crossed");
        }
        return hi;
    }

    // Smallest w in [lo, hi] with check(t_cap, l_cap, w), given a split with max W = hi
    // and max T = *t_witness <= t_cap; mirror of search_time.
    int64_t search_params(int64_t t_cap, int64_t l_cap, int64_t lo, int64_t hi, int64_t* t_witness) {
        if (lo > hi) throw std::logic_error("stage DP: empty params bracket");
        while (lo < hi) {
            const int64_t mid = lo + (hi - lo) / 2;
            const Check r = check(t_cap, l_cap, mid, t_cap, l_cap, hi);
            if (r.ok) {
                hi = r.params;
                *t_witness = r.time;
            } else {
                lo = std::max(mid + 1, r.next_params);
            }
            if (lo > hi) throw std::logic_error("stage DP: params bisection crossed");
        }
        return hi;
    }

    // The lexicographically smallest stage ends with T <= t_cap before the last stage,
    // T <= l_cap for the last one and max W <= w_cap.
    void reconstruct(int64_t t_cap, int64_t l_cap, int64_t w_cap, int64_t* ends) {
        const int64_t width = L_ + 1;
        completes_.assign((p_ + 1) * width, 0);
        completes_[p_ * width + L_] = 1;
        for (int64_t k = p_ - 1; k >= 0; --k) {
            const uint8_t* next = completes_.data() + (k + 1) * width;
            uint8_t* row = completes_.data() + k * width;
            int64_t hi = L_;             // largest end with (a),(b) for the current i
            int64_t head = 0, tail = 0;  // deque of ends j, v strictly increasing
            int64_t pushed = L_ + 1;     // ends >= pushed are in the deque (or dropped)
            // i < k is never read by the greedy pass (and bwd(k, 0) does not exist).
            for (int64_t i = L_ - 1; i >= k; --i) {
                while (hi > i && (PW_[hi] - PW_[i] > w_cap || !fits(k, i, hi))) --hi;
                // Add ends j = i + 1 .. pushed - 1 (only j = i + 1 after the first step).
                while (pushed > i + 1) {
                    const int64_t j = --pushed;
                    if (!next[j]) continue;
                    const int64_t v = PT_[j] + fwd(k, j);
                    while (tail > head && dq_val_[tail - 1] >= v) --tail;
                    dq_idx_[tail] = j;
                    dq_val_[tail] = v;
                    ++tail;
                }
                while (tail > head && dq_idx_[head] > hi) ++head;
                row[i] = tail > head && dq_val_[head] - PT_[i] <= (k == p_ - 1 ? l_cap : t_cap) - bwd(k, i);
            }
        }
        if (!completes_[0]) throw std::logic_error("stage DP: reconstruction found no split");
        int64_t i = 0;
        for (int64_t k = 0; k < p_; ++k) {
            const uint8_t* next = completes_.data() + (k + 1) * width;
            int64_t j = i + 1;
            while (j <= L_ && !(next[j] && allowed(k, i, j, t_cap, l_cap, w_cap))) ++j;
            if (j > L_) throw std::logic_error("stage DP: greedy reconstruction failed");
            ends[k] = j;
            i = j;
        }
    }

    const Problem& pb_;
    const ConfigTables& tables_;
    const int64_t L_;
    int64_t p_ = 0;
    const int64_t *PT_ = nullptr, *PW_ = nullptr, *PA_ = nullptr, *PM_ = nullptr, *PH_ = nullptr, *send_ = nullptr;
    const double *inflight_ = nullptr, *pos_fixed_ = nullptr;
    const int64_t* tier_ = nullptr;
    double mem_fixed_ = 0, mem_per_param_ = 0, capacity_ = 0, g0_ = 0, g1_ = 0;
    double host_per_param_ = 0, host_capacity_ = 0;
    bool split_last_ = false;
    int64_t scale_ = 1, head_scale_ = 0, offset_ = 0, t_bound_ = 0, w_total_ = 0, t_base_ = 0, w_base_ = 0;
    std::vector<int64_t> mem_row_;
    std::vector<int32_t> memlo_, pred_;
    std::vector<uint8_t> reach_prev_, reach_cur_, completes_;
    std::vector<int64_t> wlo_, jlow_, dq_idx_, dq_val_;
};

}  // namespace

int64_t sync_time(double g0, double g1, int64_t params) {
    return static_cast<int64_t>(sync_time_double(g0, g1, params));
}

void validate(const Problem& problem) {
    check_values(problem);
    check_precondition(problem, build_tables(problem));
}

bool has_openmp() {
#ifdef NEST_HAVE_OPENMP
    return true;
#else
    return false;
#endif
}

int max_threads() {
#ifdef NEST_HAVE_OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

int default_threads(double work) { return work < static_cast<double>(kSerialWork) ? 1 : max_threads(); }

void solve(const Problem& pb, int threads, Result& result) {
    check_values(pb);
    const ConfigTables tables = build_tables(pb);
    check_precondition(pb, tables);

    const int64_t N = pb.cand_config.shape[0];
    const int64_t total = N > 0 ? pb.pos_offset.data[N] : 0;
    result.status.assign(N, kPruned);
    result.objective.assign(N, kInf);
    result.max_time.assign(N, kInf);
    result.max_params.assign(N, kInf);
    result.ends.assign(total, -1);
    result.best = -1;
    if (N == 0) return;

    const int64_t L = pb.time_ps.shape[1];
    const double work = static_cast<double>(total) * static_cast<double>(L) * static_cast<double>(L);  // the DP's cells
    int nthreads = threads > 0 ? threads : default_threads(work);
    if (nthreads > N) nthreads = static_cast<int>(N);
    if (nthreads < 1) nthreads = 1;

    std::exception_ptr error = nullptr;
    int64_t incumbent = kInf;

    auto solve_one = [&](CandidateSolver& solver, int64_t n) {
        if (pb.cand_lower_bound.data[n] > incumbent) return;  // stays PRUNED
        const bool ok = solver.solve(n, &result.objective[n], &result.max_time[n], &result.max_params[n],
                                     result.ends.data() + pb.pos_offset.data[n]);
        result.status[n] = ok ? kSolved : kInfeasible;
    };
    // The incumbent for chunk c is the best objective of chunks < c (kInf if none).
    auto update_incumbent = [&](int64_t chunk, int64_t stop) {
        for (int64_t n = chunk; n < stop; ++n) incumbent = std::min(incumbent, result.objective[n]);
    };

#ifdef NEST_HAVE_OPENMP
    if (nthreads > 1) {
#pragma omp parallel num_threads(nthreads)
        {
            std::unique_ptr<CandidateSolver> solver;
            try {
                solver = std::make_unique<CandidateSolver>(pb, tables);
            } catch (...) {
#pragma omp critical(nest_stage_dp_error)
                if (!error) error = std::current_exception();
            }
            for (int64_t chunk = 0; chunk < N; chunk += kChunk) {
                const int64_t stop = std::min(chunk + kChunk, N);
#pragma omp for schedule(dynamic, 1)
                for (int64_t n = chunk; n < stop; ++n) {
                    if (!solver) continue;
                    try {
                        solve_one(*solver, n);
                    } catch (...) {
#pragma omp critical(nest_stage_dp_error)
                        if (!error) error = std::current_exception();
                    }
                }
                // implicit barrier above; one thread moves the incumbent, barrier after
#pragma omp single
                update_incumbent(chunk, stop);
            }
        }
        if (error) std::rethrow_exception(error);
    } else
#endif
    {
        CandidateSolver solver(pb, tables);
        for (int64_t chunk = 0; chunk < N; chunk += kChunk) {
            const int64_t stop = std::min(chunk + kChunk, N);
            for (int64_t n = chunk; n < stop; ++n) solve_one(solver, n);
            update_incumbent(chunk, stop);
        }
    }

    int64_t best = -1;
    for (int64_t n = 0; n < N; ++n)
        if (result.status[n] == kSolved && (best < 0 || result.objective[n] < result.objective[best])) best = n;
    result.best = best;
}

}  // namespace nest
