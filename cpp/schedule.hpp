// The exact time of one step's pipeline schedule, as Megatron-LM runs it.
//
// The stage DP prices a split with a closed form (python/nest/pipeline.py) that is exact
// only for some stage shapes; this is the longest path through the schedule's task
// graph for any per-stage times, in O(m v p). It is the C++ twin of the event-driven
// simulator (python/nest/simulate.py), written along a different path (dense arrays
// and a readiness sweep instead of events) so that each checks the other.
//
// Schedule (per pipeline rank d of p, in Megatron-LM's order):
//   v = 1  1F1B: min(p - d - 1, m) warm-up forwards, then one forward / one backward,
//          then the cool-down backwards.
//   v > 1  interleaved 1F1B (m % p == 0): virtual micro-batch k runs chunk
//          (k mod p v) / p (reversed for backwards) of micro-batch (k / p v) p + k mod p;
//          2 (p - d - 1) + (v - 1) p warm-up forwards, all forwards first when m == p.
// Virtual stage q (chunk q / p of rank q mod p) runs forward f[q], then sends sf[q] to
// q + 1; its backward is the recompute r[q] and the backward b[q], then the send sb[q] to
// q - 1. The sender pays its sends (its rank is busy), so a directed link never queues.
// A task starts when its rank is free and its input has arrived.
// extra_warmup (0 or 1) adds one warm-up forward on every rank, capped as above:
// Megatron-Core's combined 1F1B under --overlap-moe-expert-parallel-comm
// (get_pp_rank_microbatches, core_v0.14.0; with p = 1 the first forward runs alone).
#pragma once

#include <cstdint>
#include <vector>

namespace nest {

// Per pipeline rank: the time its last pipeline task (or send) ends. All arrays hold p v
// virtual stages in schedule order; throws std::invalid_argument on inconsistent sizes,
// negative or non-finite times, or m % p != 0 with v > 1.
std::vector<double> pipeline_finish(int64_t pp, int64_t vp, int64_t micro_batches,
                                    const std::vector<double>& forward, const std::vector<double>& recompute,
                                    const std::vector<double>& backward, const std::vector<double>& send_forward,
                                    const std::vector<double>& send_backward, int64_t extra_warmup = 0);

}  // namespace nest
