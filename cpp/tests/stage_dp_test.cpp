// Standalone fuzz driver for the C++ stage DP (cpp/stage_dp.cpp), no pybind11 and no
// Python: scripts/sanitize.sh builds it with AddressSanitizer and UndefinedBehavior-
// Sanitizer (with and without OpenMP) and runs it.
//
// For every instance the contract of nest::solve is checked:
//   * hostile input (negative values, NaN/inf doubles, inconsistent shapes, overflowing
//     sums, empty chains, null data) is rejected with std::invalid_argument -- never a
//     crash, a sanitizer report, another exception type, or a silent result;
//   * a valid input gives a self-consistent result: every solved split has p increasing
//     ends finishing at L, its recomputed stage times, parameters and memory match the
//     reported max_time / max_params / objective and fit the capacity; unsolved entries
//     hold kInf / -1; pruning follows the chunked-incumbent rule; best is the first
//     minimum; and on small chains every unpruned candidate equals brute force over all
//     splits (same objective, max T, max W and lexicographically smallest ends);
//   * the result (or the rejection message) is identical for threads 1, 2, 4, 0 (the
//     OpenMP default), -3 and 64, and validate() rejects exactly what solve() rejects.
//
// Usage: stage_dp_test [random_instances] [hostile_instances] [seed]
// Exit status 0 when every check passed, 1 otherwise (sanitizer findings abort earlier
// with their own non-zero status because the script passes -fno-sanitize-recover=all).
//
// Must be compiled with -ffp-contract=off, like stage_dp.cpp: the brute-force memory test
// below has to round exactly like the DP's.

#include "../stage_dp.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

using nest::ArrayView;
using nest::kInf;

// ---------------------------------------------------------------------------------------
// Owned arrays: a buffer plus the shape its view declares. Mutations change both, so a
// view never lies about its buffer (lying views are the caller's UB, not the solver's).
// ---------------------------------------------------------------------------------------

template <class T>
struct Array {
    std::vector<T> v;
    int ndim = 1;
    int64_t shape[3] = {0, 0, 0};
    bool null_data = false;  // hostile: a null pointer with a non-zero shape

    static Array make(std::initializer_list<int64_t> dims, T fill = T()) {
        Array a;
        a.ndim = static_cast<int>(dims.size());
        int64_t n = 1, d = 0;
        for (int64_t x : dims) {
            a.shape[d++] = x;
            n *= x;
        }
        a.v.assign(static_cast<size_t>(n), fill);
        return a;
    }

    int64_t declared() const {
        int64_t n = 1;
        for (int d = 0; d < ndim; ++d) n *= shape[d];
        return n;
    }

    ArrayView<T> view() const {
        ArrayView<T> out;
        if (!null_data && declared() != static_cast<int64_t>(v.size())) {
            std::fprintf(stderr, "driver bug: view shape does not match its buffer\n");
            std::abort();
        }
        out.data = null_data ? nullptr : v.data();
        out.ndim = ndim;
        for (int d = 0; d < 3; ++d) out.shape[d] = shape[d];
        return out;
    }

    // Resize a 1-D array to n entries (new ones = fill).
    void resize1(int64_t n, T fill = T()) {
        v.resize(static_cast<size_t>(n), fill);
        ndim = 1;
        shape[0] = n;
    }
};

struct Owned {
    Array<int64_t> time_ps, params, mem_params, act_bytes, send_ps;
    Array<int64_t> cand_config, cand_scale, cand_offset, cand_head_scale, cand_lower_bound, pos_offset, pos_tier;
    Array<double> cand_mem_fixed, cand_mem_per_param, cand_g0, cand_g1, pos_inflight, pos_mem_fixed;
    double capacity = 0;
    // Host memory tables; when their shapes do not match (a test rebuilt the other
    // tables), view() passes zeros of the right shape.
    Array<int64_t> host_params;
    Array<double> cand_host_per_param;
    double host_capacity = 0;
    mutable Array<int64_t> zero_host;
    mutable Array<double> zero_host_per_param;

    bool host_matches() const {
        return host_params.ndim == 2 && host_params.shape[0] == time_ps.shape[0] &&
               host_params.shape[1] == time_ps.shape[1] && cand_host_per_param.ndim == 1 &&
               cand_host_per_param.shape[0] == cand_config.shape[0];
    }

    nest::Problem view() const {
        nest::Problem p;
        if (host_matches()) {
            p.host_params = host_params.view();
            p.cand_host_per_param = cand_host_per_param.view();
        } else {
            zero_host = Array<int64_t>::make({time_ps.shape[0], time_ps.shape[1]}, 0);
            zero_host_per_param = Array<double>::make({cand_config.shape[0]}, 0.0);
            p.host_params = zero_host.view();
            p.cand_host_per_param = zero_host_per_param.view();
        }
        p.host_capacity = host_capacity;
        p.time_ps = time_ps.view();
        p.params = params.view();
        p.mem_params = mem_params.view();
        p.act_bytes = act_bytes.view();
        p.send_ps = send_ps.view();
        p.cand_config = cand_config.view();
        p.cand_scale = cand_scale.view();
        p.cand_offset = cand_offset.view();
        p.cand_head_scale = cand_head_scale.view();
        p.cand_mem_fixed = cand_mem_fixed.view();
        p.cand_mem_per_param = cand_mem_per_param.view();
        p.cand_g0 = cand_g0.view();
        p.cand_g1 = cand_g1.view();
        p.cand_lower_bound = cand_lower_bound.view();
        p.pos_offset = pos_offset.view();
        p.pos_inflight = pos_inflight.view();
        p.pos_mem_fixed = pos_mem_fixed.view();
        p.pos_tier = pos_tier.view();
        p.capacity = capacity;
        return p;
    }
};

// ---------------------------------------------------------------------------------------
// Random valid problems (mirrors tests/test_dp_engines.py::random_arrays).
// ---------------------------------------------------------------------------------------

struct Rng {
    std::mt19937_64 gen;
    explicit Rng(uint64_t seed) : gen(seed) {}
    int64_t integer(int64_t lo, int64_t hi) {  // inclusive
        return std::uniform_int_distribution<int64_t>(lo, hi)(gen);
    }
    double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen); }
    bool chance(double p) { return uniform(0.0, 1.0) < p; }
    template <class T>
    const T& pick(const std::vector<T>& xs) {
        return xs[static_cast<size_t>(integer(0, static_cast<int64_t>(xs.size()) - 1))];
    }
};

void fill_table(Rng& rng, Array<int64_t>& a, const std::string& kind, int64_t high) {
    const int64_t same = rng.integer(0, high);
    for (auto& x : a.v) {
        if (kind == "uniform") x = same;
        else if (kind == "few") x = rng.integer(0, 2);
        else x = rng.integer(0, high);
    }
}

Owned random_problem(Rng& rng, int64_t max_nodes, int64_t max_candidates) {
    Owned o;
    const int64_t L = rng.integer(1, max_nodes), C = rng.integer(1, 3), NT = rng.integer(1, 3);
    const std::string kind = rng.pick<std::string>({"random", "random", "uniform", "few", "big"});
    o.time_ps = Array<int64_t>::make({C, L});
    o.params = Array<int64_t>::make({C, L});
    o.act_bytes = Array<int64_t>::make({C, L});
    o.send_ps = Array<int64_t>::make({C, NT, L});
    if (kind == "big") {  // magnitudes where int64 -> double rounds
        for (auto& x : o.time_ps.v) x = rng.integer(0, 1000000000000000LL);
        for (auto& x : o.params.v) x = rng.integer(int64_t(1) << 52, int64_t(1) << 55);
        for (auto& x : o.act_bytes.v) x = rng.integer(int64_t(1) << 50, int64_t(1) << 56);
        for (auto& x : o.send_ps.v) x = rng.integer(0, 100000000000000LL);
    } else {
        fill_table(rng, o.time_ps, kind, 100);
        fill_table(rng, o.params, kind, 50);
        fill_table(rng, o.act_bytes, kind, 20);
        fill_table(rng, o.send_ps, kind, 30);
    }
    if (rng.chance(0.25)) std::fill(o.send_ps.v.begin(), o.send_ps.v.end(), 0);
    if (rng.chance(0.2)) std::fill(o.params.v.begin(), o.params.v.end(), 0);
    o.mem_params = o.params;
    if (rng.chance(0.4))  // memory weighs parameters differently from the sync (MoE)
        for (size_t i = 0; i < o.mem_params.v.size(); ++i)
            o.mem_params.v[i] = o.params.v[(i * 7 + 3) % o.params.v.size()] + o.params.v[i] / 3;

    int64_t N = rng.integer(1, max_candidates);
    if (rng.chance(0.1)) N = rng.integer(nest::kChunk + 1, 3 * nest::kChunk);  // several chunks
    o.cand_config = Array<int64_t>::make({N});
    o.cand_scale = Array<int64_t>::make({N});
    o.cand_offset = Array<int64_t>::make({N});
    o.cand_head_scale = Array<int64_t>::make({N});
    o.cand_lower_bound = Array<int64_t>::make({N});
    o.cand_mem_fixed = Array<double>::make({N});
    o.cand_mem_per_param = Array<double>::make({N});
    o.cand_g0 = Array<double>::make({N});
    o.cand_g1 = Array<double>::make({N});
    o.pos_offset = Array<int64_t>::make({N + 1});
    std::vector<int64_t> stages(N);
    for (int64_t n = 0; n < N; ++n) {
        o.cand_config.v[n] = rng.integer(0, C - 1);
        stages[n] = rng.integer(1, L);
        o.pos_offset.v[n + 1] = o.pos_offset.v[n] + stages[n];
    }
    const int64_t P = o.pos_offset.v[N];
    o.pos_tier = Array<int64_t>::make({P});
    o.pos_inflight = Array<double>::make({P});
    o.pos_mem_fixed = Array<double>::make({P});
    const bool one_f_one_b = rng.chance(0.5);
    const double inflight_unit = rng.chance(0.5) ? 0.5 : 1.0;
    for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < stages[n]; ++k) {
            const int64_t q = o.pos_offset.v[n] + k;
            o.pos_tier.v[q] = k + 1 == stages[n] ? -1 : rng.integer(0, NT - 1);
            o.pos_inflight.v[q] = one_f_one_b ? double(stages[n] - k) * inflight_unit
                                              : rng.pick<double>({0.0, 1.0, 1.5, 2.0, 3.0, 0.1});
        }
    o.capacity = rng.pick<double>({1000.0, 1e3 + 0.1, 1e4, 7e2});
    // Host memory (offloaded optimizer state) binds in some problems.
    const bool host_binds = rng.chance(0.3);
    o.host_params = Array<int64_t>::make({C, L}, 0);
    o.cand_host_per_param = Array<double>::make({N}, 0.0);
    o.host_capacity = host_binds ? rng.pick<double>({500.0, 2e3 + 0.1}) : 0.0;
    std::vector<double> h_total(C, 0.0);
    if (host_binds)
        for (int64_t c = 0; c < C; ++c)
            for (int64_t i = 0; i < L; ++i) {
                o.host_params.v[c * L + i] = rng.integer(0, 40);
                h_total[c] += double(o.host_params.v[c * L + i]);
            }

    // Memory coefficients scaled so that capacity binds somewhere in the range.
    std::vector<double> w_total(C, 0.0), a_total(C, 0.0), t_max(C, 0.0);
    double t_mean = 0, w_mean = 0;
    for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < L; ++i) {
            w_total[c] += double(o.mem_params.v[c * L + i]);
            a_total[c] += double(o.act_bytes.v[c * L + i]);
            t_max[c] = std::max(t_max[c], double(o.time_ps.v[c * L + i]));
            t_mean += double(o.time_ps.v[c * L + i]) / double(C * L);
            w_mean += double(o.params.v[c * L + i]) / double(C * L);
        }
    const bool memory_free = rng.chance(0.15), nothing_fits = rng.chance(0.05);
    const std::string lb_kind = rng.pick<std::string>({"zero", "node", "huge", "mixed"});
    for (int64_t n = 0; n < N; ++n) {
        const int64_t c = o.cand_config.v[n];
        const double tight = rng.uniform(0.05, 1.5);
        o.cand_mem_fixed.v[n] = std::round(rng.uniform(0.0, 0.6) * o.capacity * 10) / 10;
        o.cand_mem_per_param.v[n] = rng.uniform(0, 1) * o.capacity / std::max(w_total[c], 1.0) / tight;
        for (int64_t q = o.pos_offset.v[n]; q < o.pos_offset.v[n + 1]; ++q)
            o.pos_inflight.v[q] *= o.capacity / std::max(a_total[c], 1.0) / 3.0;
        for (int64_t q = o.pos_offset.v[n]; q < o.pos_offset.v[n + 1]; ++q)
            o.pos_mem_fixed.v[q] =
                rng.chance(0.3) ? std::round(rng.uniform(0.0, 0.4) * o.capacity * 10) / 10 : 0.0;
        if (memory_free) {
            o.cand_mem_fixed.v[n] = o.cand_mem_per_param.v[n] = 0.0;
            for (int64_t q = o.pos_offset.v[n]; q < o.pos_offset.v[n + 1]; ++q)
                o.pos_inflight.v[q] = o.pos_mem_fixed.v[q] = 0.0;
        }
        if (nothing_fits) o.cand_mem_fixed.v[n] = 2 * o.capacity;
        if (host_binds)
            o.cand_host_per_param.v[n] = rng.uniform(0, 1) * o.host_capacity / std::max(h_total[c], 1.0) / tight;
        o.cand_scale.v[n] = rng.integer(0, 4);
        o.cand_offset.v[n] = rng.chance(0.5) ? 0 : rng.integer(0, 399);
        o.cand_head_scale.v[n] = rng.chance(0.5) ? 0 : rng.integer(1, 11);
        o.cand_g0.v[n] = std::round(rng.uniform(0, 500) * 100) / 100;
        o.cand_g1.v[n] = rng.chance(0.2) ? 0.0 : rng.uniform(0, 3) * std::max(t_mean, 1.0) / std::max(w_mean, 1.0);
        if (lb_kind == "zero") o.cand_lower_bound.v[n] = 0;
        else if (lb_kind == "node")
            o.cand_lower_bound.v[n] = o.cand_scale.v[n] * int64_t(t_max[c]) + o.cand_offset.v[n];
        else if (lb_kind == "huge") o.cand_lower_bound.v[n] = int64_t(1) << 60;
        else o.cand_lower_bound.v[n] = rng.integer(0, 4 * (int64_t(t_max[c]) + 1));
    }
    return o;
}

// ---------------------------------------------------------------------------------------
// The checks.
// ---------------------------------------------------------------------------------------

int64_t g_failures = 0;
int64_t g_checks = 0;

void fail(const std::string& where, const std::string& what) {
    ++g_failures;
    if (g_failures <= 50) std::fprintf(stderr, "FAIL [%s]: %s\n", where.c_str(), what.c_str());
}

struct Outcome {
    bool ok = false;       // solve returned
    std::string message;   // the invalid_argument message otherwise
    nest::Result result;
};

// Runs solve(); any exception other than std::invalid_argument is a failure.
Outcome run(const Owned& o, int threads, const std::string& where) {
    Outcome out;
    try {
        nest::solve(o.view(), threads, out.result);
        out.ok = true;
    } catch (const std::invalid_argument& e) {
        out.message = e.what();
        if (out.message.empty()) fail(where, "invalid_argument without a message");
    } catch (const std::exception& e) {
        fail(where, std::string("unexpected exception type: ") + e.what());
        out.message = "<other>";
    } catch (...) {
        fail(where, "non-std exception");
        out.message = "<other>";
    }
    return out;
}

bool same_result(const nest::Result& a, const nest::Result& b) {
    return a.status == b.status && a.objective == b.objective && a.max_time == b.max_time &&
           a.max_params == b.max_params && a.ends == b.ends && a.best == b.best;
}

struct Split {
    // time: the slowest stage; head / last: the slowest before the last one / the last.
    int64_t objective = 0, time = 0, params = 0, head = 0, last = 0;
    std::vector<int64_t> ends;
    bool fits = true;
};

// Cost of candidate n split at `ends`, straight from the raw arrays (no prefix sums).
Split cost(const Owned& o, int64_t n, const std::vector<int64_t>& ends) {
    const int64_t L = o.time_ps.shape[1], NT = o.send_ps.shape[1];
    const int64_t c = o.cand_config.v[n], start = o.pos_offset.v[n], p = int64_t(ends.size());
    Split s;
    s.ends = ends;
    int64_t i = 0;
    for (int64_t k = 0; k < p; ++k) {
        const int64_t j = ends[k];
        int64_t t = 0, w = 0, m = 0, a = 0, h = 0;
        for (int64_t x = i; x < j; ++x) {
            if (o.host_matches()) h += o.host_params.v[c * L + x];
            t += o.time_ps.v[c * L + x];
            w += o.params.v[c * L + x];
            m += o.mem_params.v[c * L + x];
            a += o.act_bytes.v[c * L + x];
        }
        if (k < p - 1) t += o.send_ps.v[(c * NT + o.pos_tier.v[start + k]) * L + j - 1];
        if (k > 0) t += o.send_ps.v[(c * NT + o.pos_tier.v[start + k - 1]) * L + i - 1];
        // Same evaluation order as the DP (and Python): fixed + per_param * M + inflight * A.
        const double memory = o.cand_mem_fixed.v[n] + o.pos_mem_fixed.v[start + k] +
                              o.cand_mem_per_param.v[n] * double(m) + o.pos_inflight.v[start + k] * double(a);
        if (!(memory <= o.capacity)) s.fits = false;
        const double host = o.host_matches() ? o.cand_host_per_param.v[n] * double(h) : 0.0;
        if (!(host <= o.host_capacity)) s.fits = false;
        s.time = std::max(s.time, t);
        if (k < p - 1) s.head = std::max(s.head, t);
        else s.last = t;
        s.params = std::max(s.params, w);
        i = j;
    }
    s.objective = o.cand_scale.v[n] * s.time + o.cand_head_scale.v[n] * s.head + o.cand_offset.v[n] +
                  nest::sync_time(o.cand_g0.v[n], o.cand_g1.v[n], s.params);
    return s;
}

// The DP's tie-breaking: (F, max T, max W, ends), or (F, head, max W, last, ends) when
// the last stage is priced apart.
bool key_less(const Split& a, const Split& b, bool split_last) {
    if (a.objective != b.objective) return a.objective < b.objective;
    const int64_t at = split_last ? a.head : a.time, bt = split_last ? b.head : b.time;
    if (at != bt) return at < bt;
    if (a.params != b.params) return a.params < b.params;
    if (split_last && a.last != b.last) return a.last < b.last;
    return a.ends < b.ends;
}

// The best feasible split of candidate n over every split, or none (fits = false).
Split brute_force(const Owned& o, int64_t n) {
    const int64_t L = o.time_ps.shape[1], p = o.pos_offset.v[n + 1] - o.pos_offset.v[n];
    Split best;
    best.fits = false;
    std::vector<int64_t> ends(p);
    std::function<void(int64_t, int64_t)> rec = [&](int64_t k, int64_t lo) {
        if (k == p - 1) {
            ends[k] = L;
            const Split s = cost(o, n, ends);
            if (s.fits && (!best.fits || key_less(s, best, o.cand_head_scale.v[n] > 0))) best = s;
            return;
        }
        for (int64_t j = lo; j <= L - (p - 1 - k); ++j) {
            ends[k] = j;
            rec(k + 1, j + 1);
        }
    };
    rec(0, 1);
    return best;
}

// Every property of a returned result; brute force when the chain is small.
void verify(const Owned& o, const nest::Result& r, const std::string& where, bool brute) {
    ++g_checks;
    const int64_t N = o.cand_config.shape[0], L = o.time_ps.shape[1];
    const int64_t total = o.pos_offset.v[N];
    if (int64_t(r.status.size()) != N || int64_t(r.objective.size()) != N || int64_t(r.max_time.size()) != N ||
        int64_t(r.max_params.size()) != N || int64_t(r.ends.size()) != total) {
        fail(where, "result arrays have the wrong sizes");
        return;
    }
    int64_t incumbent = kInf, best = -1;
    for (int64_t chunk = 0; chunk < N; chunk += nest::kChunk) {
        const int64_t stop = std::min(chunk + nest::kChunk, N);
        for (int64_t n = chunk; n < stop; ++n) {
            const std::string at = where + " cand " + std::to_string(n);
            const int64_t start = o.pos_offset.v[n], p = o.pos_offset.v[n + 1] - start;
            const int64_t st = r.status[n];
            const bool should_prune = o.cand_lower_bound.v[n] > incumbent;
            if (should_prune != (st == nest::kPruned)) fail(at, "pruning does not follow the chunk incumbent");
            if (st == nest::kSolved) {
                std::vector<int64_t> ends(r.ends.begin() + start, r.ends.begin() + start + p);
                bool ordered = ends.back() == L && ends.front() >= 1;
                for (int64_t k = 1; k < p; ++k) ordered = ordered && ends[k] > ends[k - 1];
                if (!ordered) {
                    fail(at, "ends are not p increasing values ending at L");
                    continue;
                }
                const Split s = cost(o, n, ends);
                if (!s.fits) fail(at, "returned split does not fit in memory");
                if (s.time != r.max_time[n] || s.params != r.max_params[n] || s.objective != r.objective[n])
                    fail(at, "reported max_time/max_params/objective differ from the split's");
                if (brute) {
                    const Split b = brute_force(o, n);
                    if (!b.fits) fail(at, "solved but brute force finds no feasible split");
                    else if (b.objective != s.objective || b.time != s.time || b.params != s.params ||
                             b.ends != s.ends)
                        fail(at, "differs from brute force (objective " + std::to_string(s.objective) +
                                     " vs " + std::to_string(b.objective) + ")");
                }
                if (best < 0 || r.objective[n] < r.objective[best]) best = n;
            } else if (st == nest::kInfeasible || st == nest::kPruned) {
                if (r.objective[n] != kInf || r.max_time[n] != kInf || r.max_params[n] != kInf)
                    fail(at, "unsolved candidate without kInf entries");
                for (int64_t q = start; q < start + p; ++q)
                    if (r.ends[q] != -1) fail(at, "unsolved candidate with ends");
                if (st == nest::kInfeasible && brute && brute_force(o, n).fits)
                    fail(at, "infeasible but brute force finds a split");
            } else {
                fail(at, "unknown status " + std::to_string(st));
            }
        }
        for (int64_t n = chunk; n < stop; ++n) incumbent = std::min(incumbent, r.objective[n]);
    }
    if (best != r.best) fail(where, "best is not the first minimum");
}

constexpr int kThreads[] = {1, 2, 4, 0, -3, 64};

// Solve with every thread count, compare, and check validate() agrees. Returns the
// first outcome (threads = 1).
Outcome solve_all(const Owned& o, const std::string& where) {
    Outcome base = run(o, kThreads[0], where + " threads=1");
    for (size_t t = 1; t < sizeof(kThreads) / sizeof(kThreads[0]); ++t) {
        const std::string at = where + " threads=" + std::to_string(kThreads[t]);
        const Outcome other = run(o, kThreads[t], at);
        if (other.ok != base.ok) fail(at, "accepted/rejected differently from threads=1");
        else if (base.ok && !same_result(base.result, other.result)) fail(at, "result differs from threads=1");
        else if (!base.ok && base.message != other.message) fail(at, "rejection message differs from threads=1");
    }
    bool validated = true;
    try {
        nest::validate(o.view());
    } catch (const std::invalid_argument&) {
        validated = false;
    } catch (...) {
        fail(where, "validate threw something other than invalid_argument");
    }
    if (validated != base.ok) fail(where, "validate() and solve() disagree");
    return base;
}

// ---------------------------------------------------------------------------------------
// Hostile mutations of a valid problem. Each says whether solve must reject it
// (kReject) or may accept it (kEither: then the result must be consistent).
// ---------------------------------------------------------------------------------------

enum Expect { kReject, kEither };

struct Mutation {
    std::string name;
    Expect expect;
    std::function<void(Owned&, Rng&)> apply;
};

template <class T>
T& any_of(Array<T>& a, Rng& rng) {
    return a.v[static_cast<size_t>(rng.integer(0, int64_t(a.v.size()) - 1))];
}

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kPosInf = std::numeric_limits<double>::infinity();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

// Every per-candidate array, for shape mutations.
void for_candidate_arrays(Owned& o, const std::function<void(Array<int64_t>&)>& fi,
                          const std::function<void(Array<double>&)>& fd) {
    fi(o.cand_config), fi(o.cand_scale), fi(o.cand_offset), fi(o.cand_head_scale), fi(o.cand_lower_bound);
    fd(o.cand_mem_fixed), fd(o.cand_mem_per_param), fd(o.cand_g0), fd(o.cand_g1);
}

// Keep only candidate 0 with p stages on a chain of L nodes, configs unchanged.
void single_candidate(Owned& o, int64_t L, int64_t p) {
    const int64_t C = o.time_ps.shape[0], NT = o.send_ps.shape[1];
    o.time_ps = Array<int64_t>::make({C, L}, 1);
    o.params = Array<int64_t>::make({C, L}, 1);
    o.mem_params = Array<int64_t>::make({C, L}, 1);
    o.act_bytes = Array<int64_t>::make({C, L}, 1);
    o.send_ps = Array<int64_t>::make({C, NT, L}, 1);
    for_candidate_arrays(o, [](Array<int64_t>& a) { a.resize1(1); }, [](Array<double>& a) { a.resize1(1); });
    o.cand_config.v[0] = 0;
    o.cand_scale.v[0] = 1;
    o.cand_head_scale.v[0] = 0;
    o.pos_offset = Array<int64_t>::make({2});
    o.pos_offset.v[1] = p;
    o.pos_tier = Array<int64_t>::make({p}, 0);
    o.pos_tier.v[p - 1] = -1;
    o.pos_inflight = Array<double>::make({p}, 0.0);
    o.pos_mem_fixed = Array<double>::make({p}, 0.0);
    o.capacity = 1e18;
}

std::vector<Mutation> mutations() {
    std::vector<Mutation> m;
    // Negative integers in every int64 table.
    auto neg = [](Array<int64_t> Owned::*field, int64_t value) {
        return [field, value](Owned& o, Rng& rng) { any_of(o.*field, rng) = value; };
    };
    for (int64_t value : {int64_t(-1), kMin}) {
        m.push_back({"negative time_ps", kReject, neg(&Owned::time_ps, value)});
        m.push_back({"negative params", kReject, neg(&Owned::params, value)});
        m.push_back({"negative mem_params", kReject, neg(&Owned::mem_params, value)});
        m.push_back({"negative act_bytes", kReject, neg(&Owned::act_bytes, value)});
        m.push_back({"negative send_ps", kReject, neg(&Owned::send_ps, value)});
        m.push_back({"negative cand_scale", kReject, neg(&Owned::cand_scale, value)});
        m.push_back({"negative cand_offset", kReject, neg(&Owned::cand_offset, value)});
        m.push_back({"negative cand_head_scale", kReject, neg(&Owned::cand_head_scale, value)});
        m.push_back({"negative cand_lower_bound", kReject, neg(&Owned::cand_lower_bound, value)});
        m.push_back({"negative cand_config", kReject, neg(&Owned::cand_config, value)});
    }
    // NaN, +-inf and negative values in every double array, and in the capacity.
    auto dbl = [](Array<double> Owned::*field, double value) {
        return [field, value](Owned& o, Rng& rng) { any_of(o.*field, rng) = value; };
    };
    for (double value : {kNaN, kPosInf, -kPosInf, -1.0, -std::numeric_limits<double>::min()}) {
        m.push_back({"bad cand_mem_fixed", kReject, dbl(&Owned::cand_mem_fixed, value)});
        m.push_back({"bad cand_mem_per_param", kReject, dbl(&Owned::cand_mem_per_param, value)});
        m.push_back({"bad cand_g0", kReject, dbl(&Owned::cand_g0, value)});
        m.push_back({"bad cand_g1", kReject, dbl(&Owned::cand_g1, value)});
        m.push_back({"bad pos_inflight", kReject, dbl(&Owned::pos_inflight, value)});
        m.push_back({"bad pos_mem_fixed", kReject, dbl(&Owned::pos_mem_fixed, value)});
    }
    m.push_back({"nan capacity", kReject, [](Owned& o, Rng&) { o.capacity = kNaN; }});
    m.push_back({"inf host capacity", kReject, [](Owned& o, Rng&) { o.host_capacity = kPosInf; }});
    m.push_back({"negative host_params", kReject, [](Owned& o, Rng&) {
                     o.host_params = Array<int64_t>::make({o.time_ps.shape[0], o.time_ps.shape[1]}, 0);
                     o.cand_host_per_param = Array<double>::make({o.cand_config.shape[0]}, 0.0);
                     if (!o.host_params.v.empty()) o.host_params.v[0] = -1;
                 }});
    m.push_back({"nan cand_host_per_param", kReject, [](Owned& o, Rng&) {
                     o.host_params = Array<int64_t>::make({o.time_ps.shape[0], o.time_ps.shape[1]}, 0);
                     o.cand_host_per_param = Array<double>::make({o.cand_config.shape[0]}, kNaN);
                 }});
    m.push_back({"inf capacity", kReject, [](Owned& o, Rng&) { o.capacity = kPosInf; }});
    m.push_back({"-inf capacity", kReject, [](Owned& o, Rng&) { o.capacity = -kPosInf; }});
    m.push_back({"negative capacity", kEither, [](Owned& o, Rng&) { o.capacity = -1.0; }});
    m.push_back({"zero capacity", kEither, [](Owned& o, Rng&) { o.capacity = 0.0; }});
    m.push_back({"huge capacity", kEither, [](Owned& o, Rng&) { o.capacity = 1e308; }});
    // Index ranges.
    m.push_back({"cand_config = C", kReject,
                 [](Owned& o, Rng& rng) { any_of(o.cand_config, rng) = o.time_ps.shape[0]; }});
    m.push_back({"cand_config = INT64_MAX", kReject, [](Owned& o, Rng& rng) { any_of(o.cand_config, rng) = kMax; }});
    m.push_back({"pos_tier = NT on an inner position", kReject, [](Owned& o, Rng&) {
                     single_candidate(o, 4, 3);
                     o.pos_tier.v[1] = o.send_ps.shape[1];
                 }});
    m.push_back({"pos_tier = -1 on an inner position", kReject, [](Owned& o, Rng&) {
                     single_candidate(o, 4, 3);
                     o.pos_tier.v[0] = -1;
                 }});
    m.push_back({"pos_tier = INT64_MIN on an inner position", kReject, [](Owned& o, Rng&) {
                     single_candidate(o, 4, 3);
                     o.pos_tier.v[0] = kMin;
                 }});
    m.push_back({"pos_tier of a last position is ignored", kEither, [](Owned& o, Rng&) {
                     single_candidate(o, 4, 3);
                     o.pos_tier.v[2] = kMax;
                 }});
    // pos_offset.
    m.push_back({"pos_offset[0] != 0", kReject, [](Owned& o, Rng&) { o.pos_offset.v[0] = 1; }});
    m.push_back({"pos_offset[0] = -1", kReject, [](Owned& o, Rng&) { o.pos_offset.v[0] = -1; }});
    m.push_back({"zero stages", kReject, [](Owned& o, Rng&) {
                     single_candidate(o, 4, 2);
                     o.pos_offset.v[1] = 0;
                     o.pos_tier.resize1(0);
                     o.pos_inflight.resize1(0);
                     o.pos_mem_fixed.resize1(0);
                 }});
    m.push_back({"more stages than nodes", kReject, [](Owned& o, Rng&) {
                     single_candidate(o, 3, 3);
                     o.pos_offset.v[1] = 4;
                     o.pos_tier.resize1(4, 0);
                     o.pos_inflight.resize1(4, 0.0);
                     o.pos_mem_fixed.resize1(4, 0.0);
                 }});
    m.push_back({"decreasing pos_offset", kReject, [](Owned& o, Rng&) {
                     single_candidate(o, 4, 2);
                     for_candidate_arrays(o, [](Array<int64_t>& a) { a.resize1(2, 0); },
                                          [](Array<double>& a) { a.resize1(2, 0.0); });
                     o.pos_offset = Array<int64_t>::make({3});
                     o.pos_offset.v[1] = 3;  // candidate 0: 3 stages, candidate 1: -1
                     o.pos_offset.v[2] = 2;
                     o.pos_tier.resize1(2, 0);
                     o.pos_inflight.resize1(2, 0.0);
                     o.pos_mem_fixed.resize1(2, 0.0);
                 }});
    m.push_back({"pos_offset[N] = INT64_MAX", kReject, [](Owned& o, Rng&) {
                     o.pos_offset.v.back() = kMax;
                 }});
    // Consistent ends (0 and the true total) around an extreme middle entry: the stage
    // counts pos_offset[n+1] - pos_offset[n] must be formed without signed overflow.
    for (int64_t middle : {kMin, kMax, kMin + 1, kMax - 1}) {
        m.push_back({"pos_offset middle entry " + std::to_string(middle), kReject, [middle](Owned& o, Rng&) {
                         // candidate 0 is valid (one stage); 1 and 2 straddle the extreme entry
                         single_candidate(o, 4, 1);
                         for_candidate_arrays(o, [](Array<int64_t>& a) { a.resize1(3, 0); },
                                              [](Array<double>& a) { a.resize1(3, 0.0); });
                         o.pos_offset = Array<int64_t>::make({4});
                         o.pos_offset.v[1] = 1;
                         o.pos_offset.v[2] = middle;
                         o.pos_offset.v[3] = 3;
                         o.pos_tier = Array<int64_t>::make({3}, -1);
                         o.pos_inflight.resize1(3, 0.0);
                         o.pos_mem_fixed.resize1(3, 0.0);
                     }});
    }
    // Shapes.
    m.push_back({"params one node short", kReject, [](Owned& o, Rng&) {
                     const int64_t C = o.params.shape[0], L = o.params.shape[1];
                     o.params = Array<int64_t>::make({C, L + 1}, 1);
                 }});
    m.push_back({"mem_params one config more", kReject, [](Owned& o, Rng&) {
                     const int64_t C = o.mem_params.shape[0], L = o.mem_params.shape[1];
                     o.mem_params = Array<int64_t>::make({C + 1, L}, 1);
                 }});
    m.push_back({"act_bytes transposed", kReject, [](Owned& o, Rng&) {
                     const int64_t C = o.act_bytes.shape[0], L = o.act_bytes.shape[1];
                     if (C == L) o.act_bytes = Array<int64_t>::make({C, L + 1}, 0);
                     else o.act_bytes = Array<int64_t>::make({L, C}, 0);
                 }});
    m.push_back({"send_ps wrong configs", kReject, [](Owned& o, Rng&) {
                     const int64_t C = o.send_ps.shape[0], NT = o.send_ps.shape[1], L = o.send_ps.shape[2];
                     o.send_ps = Array<int64_t>::make({C + 1, NT, L}, 0);
                 }});
    m.push_back({"send_ps wrong nodes", kReject, [](Owned& o, Rng&) {
                     const int64_t C = o.send_ps.shape[0], NT = o.send_ps.shape[1], L = o.send_ps.shape[2];
                     o.send_ps = Array<int64_t>::make({C, NT, L + 2}, 0);
                 }});
    m.push_back({"send_ps 2-D", kReject, [](Owned& o, Rng&) {
                     const int64_t C = o.send_ps.shape[0], L = o.send_ps.shape[2];
                     o.send_ps = Array<int64_t>::make({C, L}, 0);
                 }});
    m.push_back({"time_ps 3-D", kReject, [](Owned& o, Rng&) {
                     const int64_t C = o.time_ps.shape[0], L = o.time_ps.shape[1];
                     o.time_ps = Array<int64_t>::make({C, 1, L}, 0);
                 }});
    m.push_back({"cand_config 2-D", kReject, [](Owned& o, Rng&) {
                     const int64_t N = o.cand_config.shape[0];
                     o.cand_config = Array<int64_t>::make({N, 1}, 0);
                 }});
    m.push_back({"pos_offset 0-D", kReject, [](Owned& o, Rng&) {
                     o.pos_offset = Array<int64_t>::make({}, 0);
                 }});
    const char* names[] = {"cand_scale", "cand_offset", "cand_lower_bound", "cand_mem_fixed",
                           "cand_mem_per_param", "cand_g0", "cand_g1", "cand_head_scale"};
    for (int which = 0; which < 8; ++which)
        for (int delta : {-1, 1}) {
            m.push_back({std::string(names[which]) + (delta > 0 ? " one longer" : " one shorter"), kReject, [which, delta](Owned& o, Rng&) {
                             const int64_t n = o.cand_config.shape[0] + delta;
                             switch (which) {
                                 case 0: o.cand_scale.resize1(n, 1); break;
                                 case 1: o.cand_offset.resize1(n, 0); break;
                                 case 2: o.cand_lower_bound.resize1(n, 0); break;
                                 case 3: o.cand_mem_fixed.resize1(n, 0.0); break;
                                 case 4: o.cand_mem_per_param.resize1(n, 0.0); break;
                                 case 5: o.cand_g0.resize1(n, 0.0); break;
                                 case 6: o.cand_g1.resize1(n, 0.0); break;
                                 default: o.cand_head_scale.resize1(n, 0); break;
                             }
                         }});
        }
    m.push_back({"pos_offset one longer", kReject,
                 [](Owned& o, Rng&) { o.pos_offset.resize1(o.pos_offset.shape[0] + 1, o.pos_offset.v.back() + 1); }});
    m.push_back({"pos_offset empty", kReject, [](Owned& o, Rng&) { o.pos_offset.resize1(0); }});
    m.push_back({"pos_inflight one shorter", kReject,
                 [](Owned& o, Rng&) { o.pos_inflight.resize1(o.pos_inflight.shape[0] - 1); }});
    m.push_back({"pos_mem_fixed one longer", kReject,
                 [](Owned& o, Rng&) { o.pos_mem_fixed.resize1(o.pos_mem_fixed.shape[0] + 1, 0.0); }});
    m.push_back({"pos_tier one longer", kReject,
                 [](Owned& o, Rng&) { o.pos_tier.resize1(o.pos_tier.shape[0] + 1, 0); }});
    m.push_back({"negative extent", kReject, [](Owned& o, Rng&) {
                     // A view claiming -1 candidates over an empty buffer... of -1 * 1 = -1
                     // elements cannot match a buffer; declare [-1, 0] (0 elements) instead.
                     o.time_ps = Array<int64_t>::make({0, 0});
                     o.time_ps.shape[0] = -1;
                 }});
    m.push_back({"null time_ps data", kReject, [](Owned& o, Rng&) { o.time_ps.null_data = true; }});
    m.push_back({"null pos_offset data", kReject, [](Owned& o, Rng&) { o.pos_offset.null_data = true; }});
    m.push_back({"null cand_g1 data", kReject, [](Owned& o, Rng&) { o.cand_g1.null_data = true; }});
    // Empty things.
    m.push_back({"empty chain", kReject, [](Owned& o, Rng&) {
                     const int64_t C = o.time_ps.shape[0], NT = o.send_ps.shape[1];
                     o.time_ps = o.params = o.mem_params = o.act_bytes = Array<int64_t>::make({C, 0});
                     o.send_ps = Array<int64_t>::make({C, NT, 0});
                 }});
    m.push_back({"empty chain, no candidates", kReject, [](Owned& o, Rng&) {
                     const int64_t C = o.time_ps.shape[0], NT = o.send_ps.shape[1];
                     o.time_ps = o.params = o.mem_params = o.act_bytes = Array<int64_t>::make({C, 0});
                     o.send_ps = Array<int64_t>::make({C, NT, 0});
                     for_candidate_arrays(o, [](Array<int64_t>& a) { a.resize1(0); },
                                          [](Array<double>& a) { a.resize1(0); });
                     o.pos_offset.resize1(1);
                     o.pos_tier.resize1(0);
                     o.pos_inflight.resize1(0);
                     o.pos_mem_fixed.resize1(0);
                 }});
    m.push_back({"no candidates", kEither, [](Owned& o, Rng&) {
                     for_candidate_arrays(o, [](Array<int64_t>& a) { a.resize1(0); },
                                          [](Array<double>& a) { a.resize1(0); });
                     o.pos_offset.resize1(1);
                     o.pos_tier.resize1(0);
                     o.pos_inflight.resize1(0);
                     o.pos_mem_fixed.resize1(0);
                 }});
    m.push_back({"no configs, no candidates", kEither, [](Owned& o, Rng&) {
                     const int64_t L = o.time_ps.shape[1], NT = o.send_ps.shape[1];
                     o.time_ps = o.params = o.mem_params = o.act_bytes = Array<int64_t>::make({0, L});
                     o.send_ps = Array<int64_t>::make({0, NT, L});
                     for_candidate_arrays(o, [](Array<int64_t>& a) { a.resize1(0); },
                                          [](Array<double>& a) { a.resize1(0); });
                     o.pos_offset.resize1(1);
                     o.pos_tier.resize1(0);
                     o.pos_inflight.resize1(0);
                     o.pos_mem_fixed.resize1(0);
                 }});
    m.push_back({"no tiers, one stage", kEither, [](Owned& o, Rng&) {
                     single_candidate(o, 5, 1);
                     o.send_ps = Array<int64_t>::make({o.time_ps.shape[0], 0, 5});
                 }});
    m.push_back({"no tiers, two stages", kReject, [](Owned& o, Rng&) {
                     single_candidate(o, 5, 2);
                     o.send_ps = Array<int64_t>::make({o.time_ps.shape[0], 0, 5});
                 }});
    // Overflow.
    m.push_back({"time_ps INT64_MAX", kReject, [](Owned& o, Rng& rng) { any_of(o.time_ps, rng) = kMax; }});
    const std::pair<const char*, Array<int64_t> Owned::*> summed[] = {
        {"time_ps", &Owned::time_ps}, {"params", &Owned::params},
        {"mem_params", &Owned::mem_params}, {"act_bytes", &Owned::act_bytes}};
    for (const auto& [name, member] : summed)
        m.push_back({std::string(name) + " sum overflows", kReject, [member = member](Owned& o, Rng&) {
                         single_candidate(o, 3, 1);
                         for (auto& x : (o.*member).v) x = kMax / 2;
                     }});
    m.push_back({"send_ps near INT64_MAX", kReject, [](Owned& o, Rng&) {
                     single_candidate(o, 3, 2);
                     for (auto& x : o.send_ps.v) x = kMax / 2;
                 }});
    m.push_back({"time bound + 1 overflows", kReject, [](Owned& o, Rng&) {
                     single_candidate(o, 1, 1);
                     o.time_ps.v.assign(o.time_ps.v.size(), kMax);
                     o.send_ps.v.assign(o.send_ps.v.size(), 0);
                 }});
    m.push_back({"scale * time overflows", kReject, [](Owned& o, Rng&) {
                     single_candidate(o, 3, 1);
                     o.cand_scale.v[0] = int64_t(1) << 40;
                     for (auto& x : o.time_ps.v) x = int64_t(1) << 30;
                 }});
    m.push_back({"scale INT64_MAX, time 0", kReject, [](Owned& o, Rng&) {
                     // time bound + 1 = 1: scale * 1 fits, but + offset + G is checked too.
                     single_candidate(o, 3, 1);
                     o.cand_scale.v[0] = kMax;
                     o.cand_offset.v[0] = 1;
                     for (auto& x : o.time_ps.v) x = 0;
                 }});
    m.push_back({"scale INT64_MAX, everything else 0", kEither, [](Owned& o, Rng&) {
                     single_candidate(o, 3, 1);
                     o.cand_scale.v[0] = kMax;
                     for (auto& x : o.time_ps.v) x = 0;
                     for (auto& x : o.send_ps.v) x = 0;
                     o.cand_g0.v[0] = o.cand_g1.v[0] = 0.0;
                 }});
    m.push_back({"scale + head_scale overflows", kReject, [](Owned& o, Rng&) {
                     single_candidate(o, 3, 2);
                     o.cand_scale.v[0] = kMax;
                     o.cand_head_scale.v[0] = 1;
                     for (auto& x : o.time_ps.v) x = 0;
                 }});
    m.push_back({"head_scale * time overflows", kReject, [](Owned& o, Rng&) {
                     single_candidate(o, 3, 2);
                     o.cand_head_scale.v[0] = int64_t(1) << 40;
                     for (auto& x : o.time_ps.v) x = int64_t(1) << 30;
                 }});
    m.push_back({"offset INT64_MAX", kReject, [](Owned& o, Rng&) {
                     single_candidate(o, 3, 1);
                     o.cand_offset.v[0] = kMax;
                 }});
    m.push_back({"g0 = 2^63", kReject, [](Owned& o, Rng& rng) { any_of(o.cand_g0, rng) = 9223372036854775808.0; }});
    m.push_back({"g0 = DBL_MAX", kReject,
                 [](Owned& o, Rng& rng) { any_of(o.cand_g0, rng) = std::numeric_limits<double>::max(); }});
    m.push_back({"g1 * params overflows double", kReject, [](Owned& o, Rng&) {
                     single_candidate(o, 3, 1);
                     o.cand_g1.v[0] = std::numeric_limits<double>::max();
                     for (auto& x : o.params.v) x = 1000;
                 }});
    m.push_back({"g1 huge, params 0", kEither, [](Owned& o, Rng&) {
                     single_candidate(o, 3, 1);
                     o.cand_g1.v[0] = std::numeric_limits<double>::max();
                     for (auto& x : o.params.v) x = 0;
                 }});
    m.push_back({"memory products overflow to inf", kEither, [](Owned& o, Rng&) {
                     for (auto& x : o.cand_mem_per_param.v) x = std::numeric_limits<double>::max();
                     for (auto& x : o.pos_inflight.v) x = std::numeric_limits<double>::max();
                 }});
    m.push_back({"denormal memory coefficients", kEither, [](Owned& o, Rng&) {
                     for (auto& x : o.cand_mem_per_param.v) x = std::numeric_limits<double>::denorm_min();
                     for (auto& x : o.pos_inflight.v) x = std::numeric_limits<double>::denorm_min();
                 }});
    // Extremes that are valid.
    m.push_back({"all zeros", kEither, [](Owned& o, Rng&) {
                     for (auto* a : {&o.time_ps, &o.params, &o.mem_params, &o.act_bytes, &o.send_ps})
                         std::fill(a->v.begin(), a->v.end(), 0);
                 }});
    m.push_back({"every node its own stage", kEither, [](Owned& o, Rng& rng) {
                     const int64_t L = rng.integer(1, 12);
                     single_candidate(o, L, L);
                     for (auto& x : o.time_ps.v) x = rng.integer(0, 50);
                     for (auto& x : o.send_ps.v) x = rng.integer(0, 50);
                 }});
    m.push_back({"large times, realistic", kEither, [](Owned& o, Rng& rng) {
                     single_candidate(o, 10, 4);
                     for (auto& x : o.time_ps.v) x = rng.integer(0, int64_t(1) << 55);
                     for (auto& x : o.send_ps.v) x = rng.integer(0, int64_t(1) << 55);
                     o.cand_scale.v[0] = 7;
                 }});
    return m;
}

// A long chain with many candidates: no brute force, but thread agreement and
// consistency on sizes where the chunked pruning and the sliding windows are exercised.
Owned large_problem(Rng& rng) {
    Owned o = random_problem(rng, 1, 1);
    const int64_t L = rng.integer(50, 400), C = rng.integer(1, 4), NT = 3, N = rng.integer(100, 400);
    o.time_ps = Array<int64_t>::make({C, L});
    o.params = Array<int64_t>::make({C, L});
    o.act_bytes = Array<int64_t>::make({C, L});
    o.send_ps = Array<int64_t>::make({C, NT, L});
    for (auto& x : o.time_ps.v) x = rng.integer(1000, 100000);
    for (auto& x : o.params.v) x = rng.integer(0, 100000000);
    for (auto& x : o.act_bytes.v) x = rng.integer(0, 10000000);
    for (auto& x : o.send_ps.v) x = rng.integer(0, 20000);
    o.mem_params = o.params;
    for_candidate_arrays(o, [N](Array<int64_t>& a) { a.resize1(N, 0); }, [N](Array<double>& a) { a.resize1(N, 0.0); });
    o.pos_offset = Array<int64_t>::make({N + 1});
    for (int64_t n = 0; n < N; ++n) {
        const int64_t p = rng.integer(1, std::min<int64_t>(L, 64));
        o.pos_offset.v[n + 1] = o.pos_offset.v[n] + p;
        o.cand_config.v[n] = rng.integer(0, C - 1);
        o.cand_scale.v[n] = rng.integer(1, 8);
        o.cand_offset.v[n] = rng.integer(0, 1000000);
        // interleaved candidates: v = 2 or 4 virtual stages per rank, the closed form's
        // factors (scale m, head_scale m (v - 1) + p - 1)
        const int64_t v = p % 4 == 0 && rng.chance(0.5) ? 4 : 2;
        o.cand_head_scale.v[n] = p % v || rng.chance(0.5) ? 0 : o.cand_scale.v[n] * (v - 1) + p / v - 1;
        o.cand_mem_fixed.v[n] = rng.uniform(0, 1e10);
        o.cand_mem_per_param.v[n] = rng.uniform(0, 16);
        o.cand_g0.v[n] = rng.uniform(0, 1e6);
        o.cand_g1.v[n] = rng.uniform(0, 1e-2);
        o.cand_lower_bound.v[n] = rng.chance(0.5) ? 0 : rng.integer(0, int64_t(1) << 32);
    }
    const int64_t P = o.pos_offset.v[N];
    o.pos_tier = Array<int64_t>::make({P});
    o.pos_inflight = Array<double>::make({P});
    o.pos_mem_fixed = Array<double>::make({P});
    for (int64_t n = 0; n < N; ++n) {
        const int64_t p = o.pos_offset.v[n + 1] - o.pos_offset.v[n];
        for (int64_t k = 0; k < p; ++k) {
            o.pos_tier.v[o.pos_offset.v[n] + k] = k + 1 == p ? -1 : rng.integer(0, NT - 1);
            o.pos_inflight.v[o.pos_offset.v[n] + k] = double(p - k);
        }
    }
    o.capacity = 2e10;
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    const int64_t n_random = argc > 1 ? std::atoll(argv[1]) : 3000;
    const int64_t n_hostile = argc > 2 ? std::atoll(argv[2]) : 3000;
    const uint64_t seed = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 20240601ULL;
    Rng rng(seed);
    const std::vector<Mutation> muts = mutations();

    int64_t valid = 0, accepted = 0, rejected = 0, large = 0, solved_cands = 0;
    // 1. Random valid problems: consistency, brute force, thread agreement.
    for (int64_t i = 0; i < n_random; ++i) {
        const Owned o = random_problem(rng, 9, 12);
        const std::string where = "random #" + std::to_string(i);
        const Outcome out = solve_all(o, where);
        if (!out.ok) {
            fail(where, "a valid problem was rejected: " + out.message);
            continue;
        }
        verify(o, out.result, where, true);
        for (int64_t s : out.result.status) solved_cands += s == nest::kSolved;
        ++valid;
    }
    // 2. Larger problems (every 50th random slot): thread agreement and consistency.
    for (int64_t i = 0; i < std::max<int64_t>(1, n_random / 50); ++i) {
        const Owned o = large_problem(rng);
        const std::string where = "large #" + std::to_string(i);
        const Outcome out = solve_all(o, where);
        if (!out.ok) fail(where, "a valid problem was rejected: " + out.message);
        else verify(o, out.result, where, false);
        ++large;
    }
    // 3. Hostile mutations, cycling through the list so every one runs many times.
    std::vector<int64_t> per_mutation_rejected(muts.size(), 0), per_mutation_runs(muts.size(), 0);
    for (int64_t i = 0; i < n_hostile; ++i) {
        const size_t which = static_cast<size_t>(i) % muts.size();
        const Mutation& mut = muts[which];
        Owned o = random_problem(rng, 9, 12);
        mut.apply(o, rng);
        const std::string where = std::string("hostile '") + mut.name + "' #" + std::to_string(i);
        const Outcome out = solve_all(o, where);
        ++per_mutation_runs[which];
        if (out.ok) {
            ++accepted;
            if (mut.expect == kReject) fail(where, "accepted a hostile problem");
            else verify(o, out.result, where, o.time_ps.shape[1] <= 12);
        } else {
            ++rejected;
            ++per_mutation_rejected[which];
        }
    }

    std::printf("stage_dp_test: seed %llu, OpenMP %s (max threads %d), thread counts 1 2 4 0 -3 64\n",
                static_cast<unsigned long long>(seed), nest::has_openmp() ? "on" : "off", nest::max_threads());
    std::printf("  random valid instances: %lld (solved candidates checked against brute force: %lld)\n",
                static_cast<long long>(valid), static_cast<long long>(solved_cands));
    std::printf("  large instances:        %lld\n", static_cast<long long>(large));
    std::printf("  hostile instances:      %lld over %zu mutations (%lld rejected, %lld accepted and checked)\n",
                static_cast<long long>(n_hostile), muts.size(), static_cast<long long>(rejected),
                static_cast<long long>(accepted));
    std::printf("  result checks: %lld, failures: %lld\n", static_cast<long long>(g_checks),
                static_cast<long long>(g_failures));
    return g_failures == 0 ? 0 : 1;
}
