// See graphs.hpp.
#include "graphs.hpp"

#include <cmath>
#include <functional>
#include <limits>
#include <queue>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace nest {

void dijkstra_rows(const CsrGraph& g, const int64_t* sources, int64_t count, double* dist) {
    const int64_t n = g.n;
    if (n < 0 || g.nnz < 0 || g.indptr[0] != 0 || g.indptr[n] != g.nnz)
        throw std::invalid_argument("indptr: not offsets into the links");
    for (int64_t u = 0; u < n; ++u)
        if (g.indptr[u + 1] < g.indptr[u]) throw std::invalid_argument("indptr: not ascending");
    for (int64_t e = 0; e < g.nnz; ++e) {
        if (g.indices[e] < 0 || g.indices[e] >= n) throw std::invalid_argument("indices: vertex out of range");
        if (!(g.data[e] > 0.0) || !std::isfinite(g.data[e]))
            throw std::invalid_argument("data: weights must be positive and finite");
    }
    for (int64_t i = 0; i < count; ++i)
        if (sources[i] < 0 || sources[i] >= n)
            throw std::invalid_argument("source = " + std::to_string(sources[i]) + ": out of range");
    const double inf = std::numeric_limits<double>::infinity();
#ifdef NEST_HAVE_OPENMP
#pragma omp parallel for schedule(dynamic, 1) if (count > 1 && n * count > (1 << 16))
#endif
    for (int64_t i = 0; i < count; ++i) {
        // A binary heap of (distance, vertex) with stale entries skipped: each vertex is
        // settled once, at its least distance, and relaxes its links from there.
        using Item = std::pair<double, int64_t>;
        std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
        double* d = dist + i * n;
        std::vector<char> done(static_cast<size_t>(n), 0);
        for (int64_t v = 0; v < n; ++v) d[v] = inf;
        d[sources[i]] = 0.0;
        heap.emplace(0.0, sources[i]);
        while (!heap.empty()) {
            const auto [du, u] = heap.top();
            heap.pop();
            if (done[static_cast<size_t>(u)]) continue;
            done[static_cast<size_t>(u)] = 1;
            for (int32_t e = g.indptr[u]; e < g.indptr[u + 1]; ++e) {
                const int64_t v = g.indices[e];
                const double through = du + g.data[e];
                if (through < d[v]) {
                    d[v] = through;
                    heap.emplace(through, v);
                }
            }
        }
    }
}

void nn_chain_codes(uint8_t* codes, int64_t n, int64_t* z) {
    constexpr uint8_t inactive = 255;
    if (n < 0 || n > std::numeric_limits<int32_t>::max()) throw std::invalid_argument("codes: too many points");
    // Per cluster, the largest code from any of its points to every point (row c of
    // `codes`, merged by max); points grouped by cluster in `order`, clusters by index, so
    // a cluster's distance to cluster c is the largest of its row over c's block.
    std::vector<int64_t> size(static_cast<size_t>(n), 1), start(static_cast<size_t>(n)), next(static_cast<size_t>(n)),
        prev(static_cast<size_t>(n));
    std::vector<int32_t> order(static_cast<size_t>(n));  // 32 bits: the gather below reads it all, step after step
    for (int64_t i = 0; i < n; ++i) {
        order[i] = static_cast<int32_t>(i);
        start[i] = i;
    }
    // active clusters as a doubly linked list in index order (n: the end, -1: the start)
    for (int64_t i = 0; i < n; ++i) {
        next[i] = i + 1;
        prev[i] = i - 1;
    }
    int64_t head = 0;
    std::vector<uint8_t> dist(static_cast<size_t>(n));
    std::vector<int64_t> chain;
    chain.reserve(static_cast<size_t>(n));
    for (int64_t k = 0; k + 1 < n; ++k) {
        if (chain.empty()) chain.push_back(head);
        int64_t x, y;
        uint8_t best;
        while (true) {
            x = chain.back();
            const uint8_t* row = codes + x * n;
            // the smallest code to another active cluster, the first cluster holding it
            best = inactive;
            y = -1;
            for (int64_t c = head; c < n; c = next[c]) {
                if (c == x) {
                    dist[c] = inactive;
                    continue;
                }
                uint8_t m = 0;
                const int32_t* pts = order.data() + start[c];
                for (int64_t j = 0; j < size[c]; ++j) m = std::max(m, row[pts[j]]);
                dist[c] = m;
                if (m < best) {
                    best = m;
                    y = c;
                }
            }
            if (chain.size() > 1) {
                const int64_t before = chain[chain.size() - 2];
                if (best >= dist[before]) {  // only a strictly closer cluster replaces the previous one
                    best = dist[before];
                    y = before;
                    break;
                }
            }
            if (y < 0) throw std::invalid_argument("codes: 255 is reserved");
            chain.push_back(y);
        }
        chain.pop_back();
        chain.pop_back();
        if (x > y) std::swap(x, y);
        z[3 * k] = x;
        z[3 * k + 1] = y;
        z[3 * k + 2] = best;
        // merge x into y: rows by max, x's points moved next to y's (blocks stay by index)
        uint8_t* rx = codes + x * n;
        uint8_t* ry = codes + y * n;
        for (int64_t j = 0; j < n; ++j) ry[j] = std::max(rx[j], ry[j]);
        const int64_t sx = start[x], sy = start[y], nxs = size[x];
        std::vector<int32_t> moved(order.begin() + sx, order.begin() + sx + nxs);
        std::copy(order.begin() + sx + nxs, order.begin() + sy, order.begin() + sx);
        std::copy(moved.begin(), moved.end(), order.begin() + (sy - nxs));
        for (int64_t c = x + 1; c <= y; ++c) start[c] -= nxs;
        size[y] += nxs;
        size[x] = 0;
        // x is no longer active
        if (prev[x] < 0)
            head = next[x];
        else
            next[prev[x]] = next[x];
        if (next[x] < n) prev[next[x]] = prev[x];
    }
}

}  // namespace nest
