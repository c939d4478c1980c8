#include "schedule.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace nest {
namespace {

struct Op {
    bool forward;
    int64_t stage;        // virtual stage
    int64_t micro_batch;
};

// Megatron-LM's forward_backward_pipelining_without_interleaving on rank d.
std::vector<Op> one_f_one_b(int64_t d, int64_t p, int64_t m, int64_t extra) {
    std::vector<Op> ops;
    ops.reserve(static_cast<size_t>(2 * m));
    const int64_t warmup = std::min(p - d - 1 + extra, m);
    int64_t next_forward = 0, next_backward = 0;
    for (; next_forward < warmup; ++next_forward) ops.push_back({true, d, next_forward});
    while (next_forward < m) {
        ops.push_back({true, d, next_forward++});
        ops.push_back({false, d, next_backward++});
    }
    for (; next_backward < m; ++next_backward) ops.push_back({false, d, next_backward});
    return ops;
}

// Megatron-LM's forward_backward_pipelining_with_interleaving on rank d (warm-up of
// megatron/core/pipeline_parallel/schedules.py get_pp_rank_microbatches, core_v0.14.0:
// capped at all micro-batches, with no special case for m == p).
std::vector<Op> interleaved(int64_t d, int64_t p, int64_t v, int64_t m, int64_t extra) {
    const int64_t total = m * v, group = p * v;
    auto at = [&](bool forward, int64_t k) {
        int64_t chunk = (k % group) / p;
        if (!forward) chunk = v - 1 - chunk;
        return Op{forward, chunk * p + d, (k / group) * p + k % p};
    };
    const int64_t warmup = std::min(2 * (p - d - 1) + (v - 1) * p + extra, total);
    std::vector<Op> ops;
    ops.reserve(static_cast<size_t>(2 * total));
    for (int64_t k = 0; k < warmup; ++k) ops.push_back(at(true, k));
    for (int64_t k = 0; k + warmup < total; ++k) {
        ops.push_back(at(true, k + warmup));
        ops.push_back(at(false, k));
    }
    for (int64_t k = std::max<int64_t>(total - warmup, 0); k < total; ++k) ops.push_back(at(false, k));
    return ops;
}

void check_times(const std::vector<double>& values, size_t n, const char* name) {
    if (values.size() != n)
        throw std::invalid_argument(std::string(name) + " has " + std::to_string(values.size()) +
                                    " entries, expected " + std::to_string(n));
    for (double x : values)
        if (!std::isfinite(x) || x < 0)
            throw std::invalid_argument(std::string(name) + " holds " + std::to_string(x) +
                                        ": times must be finite and non-negative");
}

}  // namespace

std::vector<double> pipeline_finish(int64_t pp, int64_t vp, int64_t micro_batches,
                                    const std::vector<double>& forward, const std::vector<double>& recompute,
                                    const std::vector<double>& backward, const std::vector<double>& send_forward,
                                    const std::vector<double>& send_backward, int64_t extra_warmup) {
    const int64_t p = pp, v = vp, m = micro_batches;
    if (p < 1 || v < 1 || m < 1)
        throw std::invalid_argument("pp = " + std::to_string(p) + ", vp = " + std::to_string(v) +
                                    ", micro_batches = " + std::to_string(m) + ": must be positive");
    if (extra_warmup < 0 || extra_warmup > 1)
        throw std::invalid_argument("extra_warmup = " + std::to_string(extra_warmup) + ": must be 0 or 1");
    if (v > 1 && m % p)
        throw std::invalid_argument("interleaving needs micro_batches (" + std::to_string(m) +
                                    ") divisible by pp (" + std::to_string(p) + ")");
    const int64_t limit = int64_t(1) << 24;  // each test keeps the next product in range
    if (p > limit || v > limit || m > limit || p * v > limit || p * v * m > (int64_t(1) << 30))
        throw std::invalid_argument("pp * vp * micro_batches is too large to schedule");
    const int64_t n = p * v;
    const size_t size = static_cast<size_t>(n);
    check_times(forward, size, "forward");
    check_times(recompute, size, "recompute");
    check_times(backward, size, "backward");
    check_times(send_forward, size, "send_forward");
    check_times(send_backward, size, "send_backward");

    // Per (virtual stage, micro-batch): when the forward ends, and when the forward's
    // output / the backward's gradient reaches its consumer (negative: not yet).
    const size_t cells = static_cast<size_t>(n * m);
    std::vector<double> forward_end(cells, -1.0), forward_out(cells, -1.0), gradient_out(cells, -1.0);
    auto cell = [m](int64_t q, int64_t j) { return static_cast<size_t>(q * m + j); };

    std::vector<std::vector<Op>> orders(static_cast<size_t>(p));
    for (int64_t d = 0; d < p; ++d) orders[d] = v == 1 ? one_f_one_b(d, p, m, extra_warmup) : interleaved(d, p, v, m, extra_warmup);
    std::vector<size_t> next(static_cast<size_t>(p), 0);
    std::vector<double> free_at(static_cast<size_t>(p), 0.0);

    size_t remaining = 0;
    for (const auto& o : orders) remaining += o.size();
    while (remaining) {
        size_t ran = 0;
        for (int64_t d = 0; d < p; ++d) {
            auto& order = orders[d];
            auto& pos = next[d];
            for (; pos < order.size(); ++pos) {
                const Op op = order[pos];
                const int64_t q = op.stage, j = op.micro_batch;
                double ready;
                if (op.forward) {
                    ready = q == 0 ? 0.0 : forward_out[cell(q - 1, j)];
                } else {
                    ready = forward_end[cell(q, j)];
                    if (ready >= 0 && q < n - 1) {
                        const double gradient = gradient_out[cell(q + 1, j)];
                        ready = gradient < 0 ? -1.0 : std::max(ready, gradient);
                    }
                }
                if (ready < 0) break;
                double t = std::max(free_at[d], ready);
                if (op.forward) {
                    t += forward[q];
                    forward_end[cell(q, j)] = t;
                    if (q < n - 1) t += send_forward[q];
                    forward_out[cell(q, j)] = t;
                } else {
                    t += recompute[q];
                    t += backward[q];
                    if (q > 0) t += send_backward[q];
                    gradient_out[cell(q, j)] = t;
                }
                free_at[d] = t;
                ++ran;
            }
        }
        if (!ran) throw std::logic_error("the pipeline schedule deadlocked");
        remaining -= ran;
    }
    return free_at;
}

}  // namespace nest
