// See routing.hpp. The numpy code these loops replace is python/nest/network/paths.py
// (compute_dags, _ratios); the comments say which of its steps each loop reproduces.
#include "routing.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace nest {

namespace {

[[noreturn]] __attribute__((noinline)) void out_of_range(int64_t value, int64_t size, const char* what) {
    throw std::invalid_argument(std::string(what) + " = " + std::to_string(value) + ": out of range 0.." +
                                std::to_string(size - 1));
}

inline void check_index(int64_t value, int64_t size, const char* what) {
    if (static_cast<uint64_t>(value) >= static_cast<uint64_t>(size)) out_of_range(value, size, what);
}

// Distinct link indices (0 <= link < 2^bits) ascending: an LSD radix sort, 8 bits a pass
// (few links: std::sort).
void sort_links(std::vector<int64_t>& links, std::vector<int64_t>& spare, int bits) {
    const size_t n = links.size();
    if (n < 64) {
        std::sort(links.begin(), links.end());
        return;
    }
    spare.resize(n);
    size_t count[257];
    for (int shift = 0; shift < bits; shift += 8) {
        std::fill(count, count + 257, size_t{0});
        for (int64_t e : links) ++count[((static_cast<uint64_t>(e) >> shift) & 0xff) + 1];
        for (int b = 0; b < 256; ++b) count[b + 1] += count[b];
        for (int64_t e : links) spare[count[(static_cast<uint64_t>(e) >> shift) & 0xff]++] = e;
        links.swap(spare);
    }
}

}  // namespace

void shortest_path_dags(const DagGraph& g, const int64_t* row, const int64_t* source, const int64_t* target,
                        int64_t n, Dags& out) {
    const int64_t nr = g.nr;
    out.counts.assign(static_cast<size_t>(n), 0);
    out.lats.assign(static_cast<size_t>(n), 0.0);
    out.links.clear();
    out.fracs.clear();
    // per router, reset for the routers of each pair's DAG (`seen`)
    std::vector<int64_t> mark(static_cast<size_t>(nr), -1);
    std::vector<double> sigma(static_cast<size_t>(nr), 0.0), tau(static_cast<size_t>(nr), 0.0),
        lat(static_cast<size_t>(nr), 0.0), part(static_cast<size_t>(nr), 0.0);
    std::vector<int64_t> stack, seen, dag, touched;
    std::vector<std::pair<float, int64_t>> by_level;  // (tail's distance, link)
    std::vector<size_t> cuts, level_start, rank;
    std::vector<float> levels;
    std::vector<int64_t> spare_links;
    int link_bits = 0;
    while (link_bits < 63 && (int64_t{1} << link_bits) < g.links) ++link_bits;
    for (int64_t p = 0; p < n; ++p) {
        check_index(row[p], g.rows, "row");
        check_index(source[p], nr, "source");
        check_index(target[p], nr, "target");
        const float* d = g.dist + row[p] * nr;
        const int64_t s = source[p], t = target[p];
        if (!std::isfinite(d[t]) || s == t)
            throw std::invalid_argument("pair " + std::to_string(s) + " -> " + std::to_string(t) +
                                        ": not a pair of distinct connected routers");
        // The DAG backwards from t (paths._dag_links): a link u -> v into a DAG router is
        // on the DAG when d(u) + cost = d(v) in float32; each router is expanded once.
        dag.clear();
        seen.clear();
        stack.assign(1, t);
        mark[static_cast<size_t>(t)] = p;
        seen.push_back(t);
        while (!stack.empty()) {
            const int64_t v = stack.back();
            stack.pop_back();
            const float dv = d[v];
            if (!(dv > 0.0f)) continue;  // the source: no link into it is on a shortest path
            for (int64_t e = g.in_ptr[v]; e < g.in_ptr[v + 1]; ++e) {
                const int64_t u = g.eu[e];
                const float reach = d[u] + static_cast<float>(g.ecost[e]);
                if (!(reach == dv)) continue;
                dag.push_back(e);
                if (mark[static_cast<size_t>(u)] != p) {
                    mark[static_cast<size_t>(u)] = p;
                    seen.push_back(u);
                    stack.push_back(u);
                }
            }
        }
        // The DAG's links ascending (the result's order), then by (tail's distance, link):
        // segments of equal distance, in order (a stable counting sort of the ascending
        // links by the rank of their tail's distance among the few distinct ones).
        sort_links(dag, spare_links, link_bits);
        levels.clear();
        for (int64_t e : dag) levels.push_back(d[g.eu[e]]);
        std::sort(levels.begin(), levels.end());
        levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
        level_start.assign(levels.size() + 1, 0);
        rank.clear();
        for (int64_t e : dag) {
            const size_t r = static_cast<size_t>(std::lower_bound(levels.begin(), levels.end(), d[g.eu[e]]) - levels.begin());
            rank.push_back(r);
            ++level_start[r + 1];
        }
        for (size_t r = 0; r < levels.size(); ++r) level_start[r + 1] += level_start[r];
        by_level.resize(dag.size());
        for (size_t i = 0; i < dag.size(); ++i) {
            const size_t r = rank[i];
            by_level[level_start[r]++] = {levels[r], dag[i]};
        }
        for (int64_t r : seen) {
            const size_t i = static_cast<size_t>(r);
            sigma[i] = tau[i] = part[i] = 0.0;
            lat[i] = -std::numeric_limits<double>::infinity();
        }
        sigma[static_cast<size_t>(s)] = 1.0;
        lat[static_cast<size_t>(s)] = 0.0;
        tau[static_cast<size_t>(t)] = 1.0;
        const size_t m = by_level.size();
        cuts.assign(1, 0);
        for (size_t i = 1; i < m; ++i)
            if (by_level[i].first != by_level[i - 1].first) cuts.push_back(i);
        cuts.push_back(m);
        // sigma, segment by segment: a bincount of m_tail * sigma[tail] over the heads
        // (summed from 0 in link order), then added; the latency of a head: the largest
        // lat[tail] + elat (the tails of a segment are final: heads lie further out).
        for (size_t c = 0; c + 1 < cuts.size(); ++c) {
            touched.clear();
            for (size_t i = cuts[c]; i < cuts[c + 1]; ++i) {
                const int64_t e = by_level[i].second;
                const size_t u = static_cast<size_t>(g.eu[e]), v = static_cast<size_t>(g.ev[e]);
                part[v] += g.mul_tail[e] * sigma[u];
                touched.push_back(static_cast<int64_t>(v));
                lat[v] = std::max(lat[v], lat[u] + g.elat[e]);
            }
            for (int64_t v : touched) {
                sigma[static_cast<size_t>(v)] += part[static_cast<size_t>(v)];
                part[static_cast<size_t>(v)] = 0.0;
            }
        }
        // tau, segments in reverse: m_head * tau[head] summed over the tails.
        for (size_t c = cuts.size() - 1; c-- > 0;) {
            touched.clear();
            for (size_t i = cuts[c]; i < cuts[c + 1]; ++i) {
                const int64_t e = by_level[i].second;
                const size_t u = static_cast<size_t>(g.eu[e]), v = static_cast<size_t>(g.ev[e]);
                part[u] += g.mul_head[e] * tau[v];
                touched.push_back(static_cast<int64_t>(u));
            }
            for (int64_t u : touched) {
                tau[static_cast<size_t>(u)] += part[static_cast<size_t>(u)];
                part[static_cast<size_t>(u)] = 0.0;
            }
        }
        // shares: (m_tail m_head) sigma(tail) tau(head) / sigma(t), links ascending
        const double paths = sigma[static_cast<size_t>(t)];
        for (int64_t e : dag) {
            const size_t u = static_cast<size_t>(g.eu[e]), v = static_cast<size_t>(g.ev[e]);
            const double mul = g.mul_tail[e] * g.mul_head[e];
            out.links.push_back(e);
            out.fracs.push_back(mul * sigma[u] * tau[v] / paths);
        }
        out.counts[static_cast<size_t>(p)] = static_cast<int64_t>(dag.size());
        out.lats[static_cast<size_t>(p)] = lat[static_cast<size_t>(t)];
    }
}

namespace {

// Links per block of `block` flags: a label that loads many links marks the blocks it
// loads (a store per entry, no branch) and reads only those when it ends.
constexpr int kBlockShift = 4;

// Adds the entries of flows [a, z) (one label) to `load`; with Track, lists the links
// first loaded in `touched` (`on`: flags per link), else flags their blocks in `block`.
// Returns false if an index is out of range.
template <bool Moved, bool Track>
bool add_label(const DagEntries& dags, const int64_t* ids, const double* amount, int64_t a, int64_t z,
               int64_t links, double* load, char* on, std::vector<int64_t>& touched, char* block) {
    const uint64_t n_links = static_cast<uint64_t>(links), n_cells = static_cast<uint64_t>(dags.cells);
    for (int64_t f = a; f < z; ++f) {
        const int64_t id = ids[f];
        const double amt = amount[f];
        const int64_t offset = Moved ? dags.shift[f] : 0;
        for (int64_t e = dags.ptr[id]; e < dags.ptr[id + 1]; ++e) {
            int64_t link;
            if (Moved) {
                const uint64_t cell = static_cast<uint64_t>(dags.cell[e] + offset);
                if (cell >= n_cells) return false;
                link = dags.cell_link[cell];
            } else {
                link = dags.edge[e];
            }
            if (static_cast<uint64_t>(link) >= n_links) return false;
            // the weight first, then the sum: frac * amount (x * 1.0 is x), added in order
            const double weight = dags.frac[e] * amt;
            load[link] += weight;
            if (Track) {
                if (!on[link]) {
                    on[link] = 1;
                    touched.push_back(link);
                }
            } else {
                block[link >> kBlockShift] = 1;
            }
        }
    }
    return true;
}

}  // namespace

void label_ratios(const DagEntries& dags, const int64_t* ids, const double* amount, const int64_t* label,
                  int64_t flows, int64_t nlabels, const double* capacity, int64_t links, double* ratio) {
    for (int64_t l = 0; l < nlabels; ++l) ratio[l] = 0.0;
    for (int64_t f = 0; f < flows; ++f) {
        check_index(ids[f], dags.pairs, "pair id");
        check_index(label[f], nlabels, "label");
        if (f > 0 && label[f] < label[f - 1]) throw std::invalid_argument("flows must come label after label");
        const int64_t* at = dags.ptr + ids[f];
        if (at[0] < 0 || at[1] < at[0] || at[1] > dags.entries) throw std::invalid_argument("ptr: entries out of range");
    }
    // one array of loads, zero between labels: a label's links are read and cleared when
    // it ends (all links when it loads many, else the ones it touched)
    std::vector<double> load(static_cast<size_t>(links), 0.0);
    std::vector<char> on(static_cast<size_t>(links), 0);
    const int64_t blocks = (links >> kBlockShift) + 1;
    std::vector<char> block(static_cast<size_t>(blocks), 0);
    std::vector<int64_t> touched;
    const bool moved = dags.cell != nullptr;
    int64_t a = 0;
    while (a < flows) {
        int64_t z = a, count = 0;
        for (; z < flows && label[z] == label[a]; ++z) count += dags.ptr[ids[z] + 1] - dags.ptr[ids[z]];
        const bool dense = 4 * count > links;
        touched.clear();
        bool ok;
        char* const b = block.data();
        if (moved)
            ok = dense ? add_label<true, false>(dags, ids, amount, a, z, links, load.data(), on.data(), touched, b)
                       : add_label<true, true>(dags, ids, amount, a, z, links, load.data(), on.data(), touched, b);
        else
            ok = dense ? add_label<false, false>(dags, ids, amount, a, z, links, load.data(), on.data(), touched, b)
                       : add_label<false, true>(dags, ids, amount, a, z, links, load.data(), on.data(), touched, b);
        if (!ok) throw std::invalid_argument("a DAG entry's link is out of range");
        // std::max(best, 0 / capacity) is best (0, or NaN which std::max passes over) for
        // any capacity: links no entry loaded are skipped
        double best = 0.0;
        if (dense) {
            for (int64_t k = 0; k < blocks; ++k) {
                if (!block[k]) continue;
                block[k] = 0;
                const int64_t end = std::min(links, (k + 1) << kBlockShift);
                for (int64_t i = k << kBlockShift; i < end; ++i) {
                    best = std::max(best, load[i] / capacity[i]);
                    load[i] = 0.0;
                }
            }
        } else {
            for (int64_t i : touched) {
                best = std::max(best, load[i] / capacity[i]);
                load[i] = 0.0;
                on[i] = 0;
            }
        }
        ratio[label[a]] = best;
        a = z;
    }
}

namespace {

// np.maximum's result: NaN if either is NaN, else the larger.
inline double nan_max(double a, double b) {
    if (a != a) return a;
    if (b != b) return b;
    return a < b ? b : a;
}

// (key, flow) pairs (keys >= 0, flows ascending as given) sorted by key, flows ascending
// within a key: a stable LSD radix sort, a byte at a time, skipping the bytes every key
// shares.
void sort_keys(std::vector<std::pair<int64_t, int64_t>>& keyed, std::vector<std::pair<int64_t, int64_t>>& spare) {
    const size_t n = keyed.size();
    if (n < 2) return;
    uint64_t all_or = 0, all_and = ~uint64_t{0};
    for (const auto& k : keyed) {
        all_or |= static_cast<uint64_t>(k.first);
        all_and &= static_cast<uint64_t>(k.first);
    }
    const uint64_t varies = all_or ^ all_and;  // bits on which keys differ
    spare.resize(n);
    size_t count[257];
    for (int shift = 0; shift < 64; shift += 8) {
        if (((varies >> shift) & 0xff) == 0) continue;
        std::fill(count, count + 257, size_t{0});
        for (const auto& k : keyed) ++count[((static_cast<uint64_t>(k.first) >> shift) & 0xff) + 1];
        for (int b = 0; b < 256; ++b) count[b + 1] += count[b];
        for (const auto& k : keyed) spare[count[(static_cast<uint64_t>(k.first) >> shift) & 0xff]++] = k;
        keyed.swap(spare);
    }
}

}  // namespace

void route_pairs(const AccessLinks& acc, const int64_t* src, const int64_t* dst, const double* amount,
                 const int64_t* label, int64_t flows, int64_t nlabels, double* ratio, double* access_lat,
                 int64_t* inverse, RouterPairs& pairs) {
    const int64_t n_dev = acc.devices, nr = acc.routers;
    if (nlabels < 1) throw std::invalid_argument("nlabels: must be positive");
    for (int64_t l = 0; l < nlabels; ++l) ratio[l] = 0.0;
    for (int64_t f = 0; f < flows; ++f) {
        check_index(src[f], n_dev, "source device");
        check_index(dst[f], n_dev, "target device");
        if (label != nullptr) check_index(label[f], nlabels, "label");
        check_index(acc.router_of[src[f]], nr, "router");
        check_index(acc.router_of[dst[f]], nr, "router");
    }
    pairs.source.clear();
    pairs.target.clear();
    pairs.label.clear();
    pairs.amount.clear();
    auto lab = [&](int64_t f) -> int64_t { return label != nullptr ? label[f] : 0; };
    // Access links (route's loop over (ends, cap)): per (label, device) the amounts of
    // its flows on the link, summed in flow order from 0 (np.bincount), over capacity.
    // buffers kept per thread (no allocation per call); the table of sums is all zero
    // between calls (each call clears what it used). Read through references and plain
    // pointers: a thread_local's address is looked up at each use.
    struct Buffers {
        std::vector<std::pair<int64_t, int64_t>> keyed, spare;
        std::vector<double> sums;
        std::vector<int64_t> used;
    };
    thread_local Buffers buffers;
    auto& keyed = buffers.keyed;
    auto& spare = buffers.spare;
    auto& sums = buffers.sums;
    auto& used = buffers.used;
    keyed.clear();
    used.clear();
    const bool dense = nlabels <= (int64_t{1} << 24) / std::max<int64_t>(n_dev, 1);
    if (dense && sums.size() < static_cast<size_t>(nlabels * n_dev)) sums.resize(static_cast<size_t>(nlabels * n_dev), 0.0);
    double* const use = sums.data();
    keyed.reserve(static_cast<size_t>(flows));
    used.reserve(static_cast<size_t>(flows));
    for (int side = 0; side < 2 && acc.mode != 1; ++side) {
        const int64_t* ends = side == 0 ? src : dst;
        const double* cap = side == 0 ? acc.up_cap : acc.down_cap;
        if (dense) {  // sums in a table, read where used
            used.clear();
            for (int64_t f = 0; f < flows; ++f) {
                if (src[f] == dst[f] || (acc.mode == 2 && !acc.leaf[ends[f]])) continue;
                const int64_t key = lab(f) * n_dev + ends[f];
                if (use[key] == 0.0) used.push_back(key);
                use[key] += amount[f];
            }
            for (int64_t key : used) {
                double& sum = use[key];
                const int64_t l = key / n_dev, d = key % n_dev;
                ratio[l] = nan_max(ratio[l], sum / cap[d]);
                sum = 0.0;
            }
            continue;
        }
        keyed.clear();
        for (int64_t f = 0; f < flows; ++f) {
            if (src[f] == dst[f] || (acc.mode == 2 && !acc.leaf[ends[f]])) continue;
            keyed.emplace_back(lab(f) * n_dev + ends[f], f);
        }
        sort_keys(keyed, spare);
        for (size_t i = 0; i < keyed.size();) {
            const int64_t key = keyed[i].first;
            double sum = 0.0;
            for (; i < keyed.size() && keyed[i].first == key; ++i) sum += amount[keyed[i].second];
            const int64_t l = key / n_dev, d = key % n_dev;
            ratio[l] = nan_max(ratio[l], sum / cap[d]);
        }
    }
    // Latencies of the access links, and the flows whose ends sit on different routers.
    keyed.clear();
    for (int64_t f = 0; f < flows; ++f) {
        const int64_t s = src[f], t = dst[f];
        if (acc.mode == 0)
            access_lat[f] = acc.up_lat[s] + acc.down_lat[t];
        else if (acc.mode == 1)
            access_lat[f] = 0.0;
        else
            access_lat[f] = (acc.leaf[s] ? acc.up_lat[s] : 0.0) + (acc.leaf[t] ? acc.down_lat[t] : 0.0);
        if (s == t) {
            inverse[f] = -2;
            continue;
        }
        const int64_t a = acc.router_of[s], b = acc.router_of[t];
        if (a == b) {
            inverse[f] = -1;
            continue;
        }
        keyed.emplace_back((lab(f) * nr + a) * nr + b, f);
    }
    // one pair per distinct code, ascending (np.unique), its amounts summed in flow order
    sort_keys(keyed, spare);
    for (size_t i = 0; i < keyed.size();) {
        const int64_t code = keyed[i].first, id = static_cast<int64_t>(pairs.source.size());
        double sum = 0.0;
        for (; i < keyed.size() && keyed[i].first == code; ++i) {
            sum += amount[keyed[i].second];
            inverse[keyed[i].second] = id;
        }
        pairs.label.push_back(code / (nr * nr));
        pairs.source.push_back(code % (nr * nr) / nr);
        pairs.target.push_back(code % nr);
        pairs.amount.push_back(sum);
    }
    // keep small buffers for the next call, give large ones back (a family of millions of
    // flows would otherwise hold its buffers for the rest of the process)
    constexpr size_t kKept = size_t{1} << 18;
    if (keyed.capacity() > kKept) std::vector<std::pair<int64_t, int64_t>>().swap(keyed);
    if (spare.capacity() > kKept) std::vector<std::pair<int64_t, int64_t>>().swap(spare);
    if (used.capacity() > kKept) std::vector<int64_t>().swap(used);
    if (sums.size() > kKept) std::vector<double>().swap(sums);  // all zero: each call clears what it used
}

void route_latency(const int64_t* label, const double* access_lat, const int64_t* inverse, int64_t flows,
                   const double* pair_lat, int64_t pairs, int64_t nlabels, double* latency) {
    for (int64_t l = 0; l < nlabels; ++l) latency[l] = 0.0;
    for (int64_t f = 0; f < flows; ++f) {
        if (inverse[f] == -2) continue;
        if (inverse[f] < -2 || inverse[f] >= pairs) throw std::invalid_argument("inverse: pair out of range");
        const int64_t l = label != nullptr ? label[f] : 0;
        check_index(l, nlabels, "label");
        const double lat = inverse[f] >= 0 ? access_lat[f] + pair_lat[inverse[f]] : access_lat[f];
        latency[l] = nan_max(latency[l], lat);
    }
    // one label: route takes max(0.0, the largest), which reads a NaN as 0
    if (nlabels == 1 && latency[0] != latency[0]) latency[0] = 0.0;
}

}  // namespace nest
