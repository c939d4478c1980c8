// The exact stage DP of nest: split a chain of L nodes into p contiguous, non-empty,
// memory-feasible pipeline stages minimising
//     scale * maxT + head_scale * maxH + offset + G(maxW)
// for every candidate (maxH: the slowest stage before the last one, 0 if p = 1; offset:
// the split-independent part of the objective).
//
// This header is the C++ twin of python/nest/dp_problem.py (the problem format) and
// python/nest/dp_reference.py (the oracle): same inputs, same answer to the last bit,
// same tie-breaking. It never includes pybind11; cpp/bindings/module.cpp is the thin
// layer that turns numpy arrays into the views below.
//
// Algorithm (per candidate, see stage_dp.cpp for the exactness arguments):
//   check(Tcap, Wcap)  forward reachability over positions with a two-pointer window of
//                      memory/params-feasible segment starts and a monotone deque for the
//                      time condition, restricted to ends whose suffix can still fit in
//                      the remaining stages: O(p L). An infeasible check also reports the
//                      next caps at which its outcome can change, a feasible one a split.
//   minT / minW        integer bisection on top of check, jumping to those values.
//   Pareto walk        the one of dp_reference.solve_candidate (same points, same stop);
//                      with head_scale > 0 one walk over (maxH, maxW) per cap on the last
//                      stage, the caps stepping down through the last stages the walks meet.
//   reconstruction     backward "completes" table (mirrored sliding window) and a greedy
//                      pass: the lexicographically smallest vector of stage ends.
//   candidates         in chunks of kChunk with lower-bound pruning against the best of
//                      earlier chunks; a chunk's candidates run in parallel (OpenMP).
//
// Precondition (checked, std::invalid_argument otherwise): all arithmetic fits in int64.
// For every config c, Tbound[c] = sum(time_ps[c]) + 2 * max(send_ps[c]) (a bound on any
// stage time) plus one, sum(params[c]) and sum(act_bytes[c]) fit in int64; for every
// candidate n, G(sum(params[c])) < 2^63 and (scale[n] + head_scale[n]) * (Tbound[c] + 1) +
// offset[n] + G(sum(params[c])) <= INT64_MAX. The Python reference would solve some such inputs with unbounded ints
// (or fail with OverflowError when storing the result); realistic inputs (picoseconds,
// bytes) are many orders of magnitude below these limits.
#pragma once

#include <cstdint>
#include <vector>

namespace nest {

constexpr int64_t kChunk = 32;  // candidates solved between two incumbent updates
// Below this many (stage position x node x node) cells in a batch, the default thread
// count solves it on one thread: a search's batch of 64 candidates on a chain of about 100
// nodes (gpt3-175b, 32 stage positions: 20M cells, about 3 ms on one core, the bounds
// prune most cells) costs less than what waking a team and its barriers cost on a machine
// whose cores are busy with other processes (with 2 threads a gpt3-175b plan on 1024
// dgx-a100 took 1.06x its --threads 1 time beside other processes, issue 19).
constexpr int64_t kSerialWork = 32000000;
constexpr int64_t kSolved = 0;
constexpr int64_t kInfeasible = 1;
constexpr int64_t kPruned = 2;
constexpr int64_t kInf = INT64_MAX;

// A read-only view on a C-contiguous array: data pointer plus its shape.
template <class T>
struct ArrayView {
    const T* data = nullptr;
    int ndim = 0;
    int64_t shape[3] = {0, 0, 0};

    int64_t size() const {
        int64_t s = 1;
        for (int d = 0; d < ndim; ++d) s *= shape[d];
        return s;
    }
};

// The dense tables of python/nest/dp_problem.py::DPProblem (same names, same layout).
struct Problem {
    ArrayView<int64_t> time_ps;           // [C, L]
    ArrayView<int64_t> params;            // [C, L] weight of the exposed sync G (and of w caps)
    ArrayView<int64_t> mem_params;        // [C, L] parameters whose state occupies memory
    ArrayView<int64_t> act_bytes;         // [C, L]
    ArrayView<int64_t> send_ps;           // [C, NT, L]
    ArrayView<int64_t> cand_config;       // [N]
    ArrayView<int64_t> cand_scale;        // [N] >= 0
    ArrayView<int64_t> cand_offset;       // [N] >= 0, added to the objective
    ArrayView<int64_t> cand_head_scale;   // [N] >= 0, factor of the slowest stage before the last
    ArrayView<double> cand_mem_fixed;     // [N]
    ArrayView<double> cand_mem_per_param; // [N]
    ArrayView<double> cand_g0;            // [N]
    ArrayView<double> cand_g1;            // [N]
    ArrayView<int64_t> cand_lower_bound;  // [N]
    ArrayView<int64_t> pos_offset;        // [N + 1]
    ArrayView<double> pos_inflight;       // [P]
    ArrayView<double> pos_mem_fixed;      // [P] bytes the position holds besides its segment
    ArrayView<int64_t> pos_tier;          // [P]
    double capacity = 0.0;
    // Host memory: host_per_param * sum(host_params[i..j)) <= host_capacity per stage.
    ArrayView<int64_t> host_params;        // [C, L] host bytes of offloaded state
    ArrayView<double> cand_host_per_param; // [N]
    double host_capacity = 0.0;
};

// python/nest/dp_problem.py::DPResult. Unsolved entries hold kInf (and -1 in ends).
struct Result {
    std::vector<int64_t> status;
    std::vector<int64_t> objective;
    std::vector<int64_t> max_time;
    std::vector<int64_t> max_params;
    std::vector<int64_t> ends;
    int64_t best = -1;
};

// Throw std::invalid_argument unless the problem is consistent (the checks of
// DPProblem.check plus the int64 precondition above).
void validate(const Problem& problem);

// G(w) = floor(g0 + g1 * w + 0.5), evaluated like dp_problem.sync_time (IEEE double).
int64_t sync_time(double g0, double g1, int64_t params);

// Validate, then solve every candidate with chunked lower-bound pruning. threads <= 0
// means the OpenMP default, or one thread for a batch below kSerialWork (default_threads).
// The result does not depend on the thread count.
void solve(const Problem& problem, int threads, Result& result);

// Whether the library was built with OpenMP, and the default thread count (1 without).
bool has_openmp();
int max_threads();

// The threads solve() uses for `threads` <= 0 on a batch of `work` cells (stage positions
// x nodes^2 summed over its candidates): 1 below kSerialWork, else max_threads().
int default_threads(double work);

}  // namespace nest
