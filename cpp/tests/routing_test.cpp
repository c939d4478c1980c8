// Standalone checks of cpp/routing.cpp and cpp/graphs.cpp (no pybind11), built and run under AddressSanitizer
// and UndefinedBehaviorSanitizer by scripts/sanitize.sh.
//
//   routing_test [random_instances] [seed]
//
// Random router graphs (integer costs, twin multiplicities 1-3, some links missing):
// shortest_path_dags must return, per pair, exactly the links on some shortest path, each
// with the share of the s -> t paths (counted by brute-force enumeration, twins counted as
// parallel links) that use it, and the longest latency of a shortest path. label_ratios
// must equal a plain double loop in the same order, bit for bit, with and without the
// torus translation of entries. dijkstra_rows must equal relaxation to the fixed point
// (Bellman-Ford: every link relaxed until nothing changes) bit for bit, on weights whose
// path sums depend on their order; nn_chain_codes must make the merges of the chain run
// on a cluster x cluster matrix of codes updated by max (complete linkage), the same
// clusters, codes and order. route_pairs and route_latency must equal plain loops over
// std::map (access loads and pair amounts summed in flow order, keys ascending). Hostile
// input: every out-of-range index is rejected with std::invalid_argument.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "checks.hpp"
#include "graphs.hpp"
#include "routing.hpp"

namespace {

using nest_tests::check;
using nest_tests::g_checks;
using nest_tests::g_failures;

struct Graph {
    int64_t nr = 0;
    std::vector<int64_t> eu, ev, in_ptr;  // links sorted by head
    std::vector<double> cost, lat, mul_tail, mul_head;
    std::vector<float> dist;  // [nr, nr]: row s = distances from s (float32, as the caller's)

    nest::DagGraph view() const {
        nest::DagGraph g;
        g.dist = dist.data();
        g.rows = nr;
        g.nr = nr;
        g.in_ptr = in_ptr.data();
        g.eu = eu.data();
        g.ev = ev.data();
        g.ecost = cost.data();
        g.elat = lat.data();
        g.mul_tail = mul_tail.data();
        g.mul_head = mul_head.data();
        g.links = static_cast<int64_t>(eu.size());
        return g;
    }
};

Graph random_graph(std::mt19937_64& rng) {
    Graph g;
    g.nr = std::uniform_int_distribution<int64_t>(2, 7)(rng);
    std::uniform_int_distribution<int> cost(1, 3), mul(1, 3), coin(0, 2);
    std::uniform_real_distribution<double> lat(1e-7, 5e-6);
    struct Link { int64_t u, v; double c, l, mt, mh; };
    std::vector<Link> links;
    for (int64_t u = 0; u < g.nr; ++u)
        for (int64_t v = 0; v < g.nr; ++v)
            if (u != v && coin(rng) != 0) links.push_back({u, v, double(cost(rng)), lat(rng), double(mul(rng)),
                                                          double(mul(rng))});
    std::stable_sort(links.begin(), links.end(), [](const Link& a, const Link& b) { return a.v < b.v; });
    g.in_ptr.assign(static_cast<size_t>(g.nr + 1), 0);
    for (const Link& k : links) {
        g.eu.push_back(k.u);
        g.ev.push_back(k.v);
        g.cost.push_back(k.c);
        g.lat.push_back(k.l);
        g.mul_tail.push_back(k.mt);
        g.mul_head.push_back(k.mh);
        ++g.in_ptr[static_cast<size_t>(k.v + 1)];
    }
    for (int64_t v = 0; v < g.nr; ++v) g.in_ptr[static_cast<size_t>(v + 1)] += g.in_ptr[static_cast<size_t>(v)];
    // Bellman-Ford in float32 (small integer costs: exact)
    const float inf = std::numeric_limits<float>::infinity();
    g.dist.assign(static_cast<size_t>(g.nr * g.nr), inf);
    for (int64_t s = 0; s < g.nr; ++s) {
        float* d = g.dist.data() + s * g.nr;
        d[s] = 0.0f;
        for (int64_t round = 0; round < g.nr; ++round)
            for (size_t e = 0; e < g.eu.size(); ++e)
                d[g.ev[e]] = std::min(d[g.ev[e]], d[g.eu[e]] + static_cast<float>(g.cost[e]));
    }
    return g;
}

// Every shortest s -> t path as its link sequence (depth-first over links on a shortest path).
void enumerate(const Graph& g, int64_t s, int64_t t, int64_t at, std::vector<int64_t>& path,
               std::vector<std::vector<int64_t>>& out) {
    const float* d = g.dist.data() + s * g.nr;
    if (at == t) {
        out.push_back(path);
        return;
    }
    for (size_t e = 0; e < g.eu.size(); ++e) {
        if (g.eu[e] != at) continue;
        const int64_t v = g.ev[e];
        const float dt = g.dist[static_cast<size_t>(v * g.nr + t)];
        // on a shortest s -> t path: d(s, u) + c = d(s, v) and d(s, v) + d(v, t) = d(s, t)
        if (d[at] + static_cast<float>(g.cost[e]) == d[v] && d[v] + dt == d[t]) {
            path.push_back(static_cast<int64_t>(e));
            enumerate(g, s, t, v, path, out);
            path.pop_back();
        }
    }
}

void check_dags(const Graph& g, int64_t instance) {
    std::vector<int64_t> row, src, dst;
    for (int64_t s = 0; s < g.nr; ++s)
        for (int64_t t = 0; t < g.nr; ++t)
            if (s != t && std::isfinite(g.dist[static_cast<size_t>(s * g.nr + t)])) {
                row.push_back(s);
                src.push_back(s);
                dst.push_back(t);
            }
    nest::Dags out;
    nest::shortest_path_dags(g.view(), row.data(), src.data(), dst.data(), static_cast<int64_t>(src.size()), out);
    check(out.counts.size() == src.size() && out.lats.size() == src.size(), "one count and latency per pair");
    size_t at = 0;
    for (size_t p = 0; p < src.size(); ++p) {
        const std::string where = "instance " + std::to_string(instance) + " pair " + std::to_string(src[p]) +
                                  "->" + std::to_string(dst[p]);
        std::vector<std::vector<int64_t>> paths;
        std::vector<int64_t> path;
        enumerate(g, src[p], dst[p], src[p], path, paths);
        double longest = -1.0;
        for (const auto& k : paths) {
            double latency = 0.0;
            for (int64_t e : k) latency += g.lat[e];
            longest = std::max(longest, latency);
        }
        std::vector<int64_t> expected;
        for (size_t k = 0; k < paths.size(); ++k)
            for (int64_t e : paths[k]) expected.push_back(e);
        std::sort(expected.begin(), expected.end());
        expected.erase(std::unique(expected.begin(), expected.end()), expected.end());
        const size_t count = static_cast<size_t>(out.counts[p]);
        std::vector<int64_t> got(out.links.begin() + static_cast<long>(at),
                                 out.links.begin() + static_cast<long>(at + count));
        check(got == expected, where + ": the DAG's links are the links of the shortest paths");
        check(std::fabs(out.lats[p] - longest) <= 1e-12 * std::max(1.0, longest),
              where + ": latency is the longest shortest path's");
        for (size_t i = 0; i < count; ++i) {
            const double frac = out.fracs[at + i];
            check(std::isfinite(frac) && frac > 0.0, where + ": shares are positive");
        }
        at += count;
    }
    check(at == out.links.size() && at == out.fracs.size(), "entries are the counts' sum");
}

// Shares with every multiplicity 1: the fraction of the (equally likely) shortest paths
// through each link, by enumeration.
void check_shares(std::mt19937_64& rng, int64_t instance) {
    Graph g = random_graph(rng);
    std::fill(g.mul_tail.begin(), g.mul_tail.end(), 1.0);
    std::fill(g.mul_head.begin(), g.mul_head.end(), 1.0);
    for (int64_t s = 0; s < g.nr; ++s)
        for (int64_t t = 0; t < g.nr; ++t) {
            if (s == t || !std::isfinite(g.dist[static_cast<size_t>(s * g.nr + t)])) continue;
            nest::Dags out;
            nest::shortest_path_dags(g.view(), &s, &s, &t, 1, out);
            std::vector<std::vector<int64_t>> paths;
            std::vector<int64_t> path;
            enumerate(g, s, t, s, path, paths);
            for (size_t i = 0; i < out.links.size(); ++i) {
                double through = 0.0;
                for (const auto& k : paths)
                    through += std::count(k.begin(), k.end(), out.links[i]) > 0 ? 1.0 : 0.0;
                const double expected = through / static_cast<double>(paths.size());
                check(std::fabs(out.fracs[i] - expected) <= 1e-12,
                      "instance " + std::to_string(instance) + ": share of link " + std::to_string(out.links[i]) +
                          " is the share of shortest paths through it");
            }
        }
}

// large: many links and entries (dense labels, many blocks)
void check_ratios(std::mt19937_64& rng, int64_t instance, bool large = false) {
    std::uniform_int_distribution<int64_t> small(1, 12);
    const int64_t links = large ? 5000 : small(rng) + 2, pairs = small(rng), flows = large ? 60000 : small(rng) * 2,
                  nlabels = large ? 7 : small(rng) / 3 + 1;
    std::vector<int64_t> ptr(1, 0);
    std::vector<int32_t> edge;
    std::vector<double> frac;
    std::uniform_real_distribution<double> unit(0.05, 1.0);
    std::uniform_int_distribution<int64_t> any_link(0, links - 1);
    for (int64_t p = 0; p < pairs; ++p) {
        const int64_t n = large ? small(rng) * 4 : small(rng) % 5;
        for (int64_t i = 0; i < n; ++i) {
            edge.push_back(static_cast<int32_t>(any_link(rng)));
            frac.push_back(unit(rng));
        }
        ptr.push_back(static_cast<int64_t>(edge.size()));
    }
    std::vector<int64_t> ids, label;
    std::vector<double> amount;
    for (int64_t f = 0; f < flows; ++f) {
        ids.push_back(small(rng) % pairs);
        label.push_back(f * nlabels / flows);
        amount.push_back(f % 3 == 0 ? 1.0 : unit(rng) * 1e9);
    }
    std::vector<double> capacity(static_cast<size_t>(links));
    for (double& c : capacity) c = unit(rng) * 1e11;
    // the translation: cell[e] + shift[f] indexes cell_link
    const int64_t cells = links * 2;
    std::vector<int32_t> cell(edge.size());
    std::vector<int64_t> shift(static_cast<size_t>(flows));
    std::vector<int32_t> cell_link(static_cast<size_t>(cells));
    for (size_t e = 0; e < cell.size(); ++e) cell[e] = static_cast<int32_t>(any_link(rng));
    for (int64_t& s : shift) s = any_link(rng);
    for (int32_t& c : cell_link) c = static_cast<int32_t>(any_link(rng));
    for (int moved = 0; moved < 2; ++moved) {
        nest::DagEntries d;
        d.ptr = ptr.data();
        d.pairs = pairs;
        d.edge = edge.data();
        d.frac = frac.data();
        d.entries = static_cast<int64_t>(edge.size());
        if (moved) {
            d.cell = cell.data();
            d.shift = shift.data();
            d.cell_link = cell_link.data();
            d.cells = cells;
        }
        std::vector<double> ratio(static_cast<size_t>(nlabels), -1.0), expected(static_cast<size_t>(nlabels), 0.0);
        nest::label_ratios(d, ids.data(), amount.data(), label.data(), flows, nlabels, capacity.data(), links,
                           ratio.data());
        for (int64_t l = 0; l < nlabels; ++l) {
            std::vector<double> load(static_cast<size_t>(links), 0.0);
            for (int64_t f = 0; f < flows; ++f) {
                if (label[f] != l) continue;
                for (int64_t e = ptr[ids[f]]; e < ptr[ids[f] + 1]; ++e) {
                    const int64_t link = moved ? cell_link[cell[e] + shift[f]] : edge[e];
                    const double weight = frac[e] * amount[f];
                    load[link] += weight;
                }
            }
            for (int64_t i = 0; i < links; ++i) expected[l] = std::max(expected[l], load[i] / capacity[i]);
        }
        check(ratio == expected, "instance " + std::to_string(instance) + (moved ? " (translated)" : "") +
                                     ": label ratios equal the plain loop bit for bit");
    }
}

void check_dijkstra(std::mt19937_64& rng, int64_t instance) {
    const int64_t n = std::uniform_int_distribution<int64_t>(1, 12)(rng);
    const double weights[] = {1.0 / 3.0, 0.1, 0.7, 1e-6 + 1.0 / 7.0, 2.0, 1e-3, 3.3};
    std::vector<int32_t> indptr(static_cast<size_t>(n + 1), 0), indices;
    std::vector<double> data;
    std::uniform_int_distribution<int> coin(0, 2), pick(0, 6);
    for (int64_t u = 0; u < n; ++u) {
        for (int64_t v = 0; v < n; ++v)
            if (coin(rng) == 0) {
                indices.push_back(static_cast<int32_t>(v));
                data.push_back(weights[pick(rng)]);
            }
        indptr[static_cast<size_t>(u + 1)] = static_cast<int32_t>(indices.size());
    }
    nest::CsrGraph g;
    g.n = n;
    g.indptr = indptr.data();
    g.indices = indices.data();
    g.data = data.data();
    g.nnz = static_cast<int64_t>(indices.size());
    std::vector<int64_t> sources;
    for (int64_t s = 0; s < n; ++s) sources.push_back(s);
    std::vector<double> dist(static_cast<size_t>(n * n));
    nest::dijkstra_rows(g, sources.data(), n, dist.data());
    const double inf = std::numeric_limits<double>::infinity();
    for (int64_t s = 0; s < n; ++s) {
        std::vector<double> d(static_cast<size_t>(n), inf);
        d[static_cast<size_t>(s)] = 0.0;
        for (bool changed = true; changed;) {
            changed = false;
            for (int64_t u = 0; u < n; ++u)
                for (int32_t e = indptr[u]; e < indptr[u + 1]; ++e)
                    if (d[u] + data[e] < d[indices[e]]) {
                        d[indices[e]] = d[u] + data[e];
                        changed = true;
                    }
        }
        for (int64_t v = 0; v < n; ++v)
            check(dist[static_cast<size_t>(s * n + v)] == d[static_cast<size_t>(v)],
                  "dijkstra instance " + std::to_string(instance) + ": d(" + std::to_string(s) + ", " +
                      std::to_string(v) + ") is the fixed point's");
    }
}

// The chain on a cluster x cluster matrix (scipy's nn_chain with complete linkage's update).
std::vector<int64_t> chain_on_matrix(std::vector<uint8_t> d, int64_t n) {
    std::vector<int64_t> size(static_cast<size_t>(n), 1), chain, z;
    for (int64_t k = 0; k + 1 < n; ++k) {
        if (chain.empty())
            for (int64_t i = 0; i < n; ++i)
                if (size[i] > 0) {
                    chain.push_back(i);
                    break;
                }
        int64_t x, y = -1;
        int current;
        while (true) {
            x = chain.back();
            current = 256;
            if (chain.size() > 1) {
                y = chain[chain.size() - 2];
                current = d[x * n + y];
            }
            for (int64_t i = 0; i < n; ++i)
                if (size[i] > 0 && i != x && d[x * n + i] < current) {
                    current = d[x * n + i];
                    y = i;
                }
            if (chain.size() > 1 && y == chain[chain.size() - 2]) break;
            chain.push_back(y);
        }
        chain.resize(chain.size() - 2);
        if (x > y) std::swap(x, y);
        z.insert(z.end(), {x, y, current});
        size[y] += size[x];
        size[x] = 0;
        for (int64_t i = 0; i < n; ++i)
            if (size[i] > 0 && i != y) d[i * n + y] = d[y * n + i] = std::max(d[i * n + x], d[i * n + y]);
    }
    return z;
}

void check_chain(std::mt19937_64& rng, int64_t instance) {
    const int64_t n = std::uniform_int_distribution<int64_t>(1, 30)(rng);
    const int levels = std::uniform_int_distribution<int>(1, 6)(rng);
    std::uniform_int_distribution<int> code(0, levels - 1);
    std::vector<uint8_t> codes(static_cast<size_t>(n * n), 0);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = i + 1; j < n; ++j) codes[i * n + j] = codes[j * n + i] = static_cast<uint8_t>(code(rng));
    const auto expected = chain_on_matrix(codes, n);
    std::vector<int64_t> z(static_cast<size_t>(3 * std::max<int64_t>(n - 1, 0)));
    nest::nn_chain_codes(codes.data(), n, z.data());
    check(z == expected, "chain instance " + std::to_string(instance) + ": the merges of the matrix chain");
}

// route_pairs and route_latency against a plain loop over std::map: per (label, device)
// the access loads summed in flow order; per (label, router, router) the amounts in flow
// order, keys ascending; latencies the largest per label. Some devices hang off a router
// (leaves), the others are routers; many labels (sorted keys) or few (a table).
void check_route_pairs(std::mt19937_64& rng, int64_t instance) {
    std::uniform_int_distribution<int64_t> small(1, 12);
    std::uniform_real_distribution<double> unit(0.05, 1.0);
    const int64_t devices = small(rng) + 1, routers = small(rng) % 5 + 1, flows = small(rng) * 3;
    const int mode = static_cast<int>(instance % 3);
    const int64_t nlabels = instance % 7 == 0 ? (int64_t{1} << 24) / devices + 1 : small(rng) % 4 + 1;
    std::vector<uint8_t> leaf(static_cast<size_t>(devices));
    std::vector<double> up_cap(leaf.size()), down_cap(leaf.size()), up_lat(leaf.size()), down_lat(leaf.size());
    std::vector<int64_t> router_of(leaf.size());
    for (int64_t d = 0; d < devices; ++d) {
        leaf[d] = mode == 0 ? 1 : mode == 1 ? 0 : static_cast<uint8_t>(small(rng) % 2);
        up_cap[d] = leaf[d] ? unit(rng) * 1e11 : std::numeric_limits<double>::infinity();
        down_cap[d] = leaf[d] ? unit(rng) * 1e11 : std::numeric_limits<double>::infinity();
        up_lat[d] = leaf[d] ? unit(rng) * 1e-6 : 0.0;
        down_lat[d] = leaf[d] ? unit(rng) * 1e-6 : 0.0;
        router_of[d] = small(rng) % routers;
    }
    std::vector<int64_t> src(static_cast<size_t>(flows)), dst(src.size()), label(src.size());
    std::vector<double> amount(src.size());
    for (int64_t f = 0; f < flows; ++f) {
        src[f] = small(rng) % devices;
        dst[f] = small(rng) % devices;
        label[f] = nlabels > 4 ? nlabels - 1 - small(rng) % 3 : small(rng) % nlabels;
        amount[f] = f % 3 == 0 ? 1.0 : unit(rng) * 1e9;
    }
    nest::AccessLinks acc;
    acc.leaf = leaf.data();
    acc.up_cap = up_cap.data();
    acc.down_cap = down_cap.data();
    acc.up_lat = up_lat.data();
    acc.down_lat = down_lat.data();
    acc.router_of = router_of.data();
    acc.devices = devices;
    acc.routers = routers;
    acc.mode = mode;
    std::vector<double> ratio(static_cast<size_t>(nlabels)), access_lat(src.size()), latency(ratio.size());
    std::vector<int64_t> inverse(src.size());
    nest::RouterPairs pairs;
    nest::route_pairs(acc, src.data(), dst.data(), amount.data(), label.data(), flows, nlabels, ratio.data(),
                      access_lat.data(), inverse.data(), pairs);
    std::vector<double> pair_lat(pairs.source.size());
    for (double& x : pair_lat) x = unit(rng) * 1e-5;
    nest::route_latency(label.data(), access_lat.data(), inverse.data(), flows, pair_lat.data(),
                        static_cast<int64_t>(pair_lat.size()), nlabels, latency.data());
    // the plain loops
    std::vector<double> want_ratio(ratio.size(), 0.0), want_latency(ratio.size(), 0.0);
    for (int side = 0; side < 2 && mode != 1; ++side) {
        std::map<std::pair<int64_t, int64_t>, double> use;
        for (int64_t f = 0; f < flows; ++f) {
            const int64_t d = side == 0 ? src[f] : dst[f];
            if (src[f] != dst[f] && leaf[d]) use[{label[f], d}] += amount[f];
        }
        for (const auto& [key, load] : use)
            want_ratio[key.first] = std::max(want_ratio[key.first], load / (side == 0 ? up_cap : down_cap)[key.second]);
    }
    std::map<std::tuple<int64_t, int64_t, int64_t>, double> sums;
    for (int64_t f = 0; f < flows; ++f)
        if (src[f] != dst[f] && router_of[src[f]] != router_of[dst[f]])
            sums[{label[f], router_of[src[f]], router_of[dst[f]]}] += amount[f];
    std::vector<std::tuple<int64_t, int64_t, int64_t>> keys;
    bool same = pairs.source.size() == sums.size();
    for (const auto& [key, sum] : sums) {
        const size_t i = keys.size();
        keys.push_back(key);
        same = same && i < pairs.source.size() && pairs.label[i] == std::get<0>(key) &&
               pairs.source[i] == std::get<1>(key) && pairs.target[i] == std::get<2>(key) && pairs.amount[i] == sum;
    }
    for (int64_t f = 0; f < flows && same; ++f) {
        const int64_t s = src[f], t = dst[f];
        const double lat = (leaf[s] ? up_lat[s] : 0.0) + (leaf[t] ? down_lat[t] : 0.0);
        if (s == t) {
            same = inverse[f] == -2;
            continue;
        }
        same = access_lat[f] == lat;
        if (router_of[s] == router_of[t]) {
            same = same && inverse[f] == -1;
            want_latency[label[f]] = std::max(want_latency[label[f]], lat);
            continue;
        }
        const auto at = std::find(keys.begin(), keys.end(), std::make_tuple(label[f], router_of[s], router_of[t]));
        same = same && inverse[f] == at - keys.begin();
        want_latency[label[f]] = std::max(want_latency[label[f]], lat + pair_lat[static_cast<size_t>(at - keys.begin())]);
    }
    check(same && ratio == want_ratio && latency == want_latency,
          "instance " + std::to_string(instance) + ": route_pairs and route_latency equal the plain loops");
}

template <class F>
void expect_invalid(F f, const std::string& what) {
    bool thrown = false;
    try {
        f();
    } catch (const std::invalid_argument&) {
        thrown = true;
    }
    check(thrown, what + " is rejected");
}

void check_hostile() {
    std::mt19937_64 rng(7);
    Graph g;
    do g = random_graph(rng);
    while (!std::isfinite(g.dist[1]));  // 0 -> 1 reachable
    nest::Dags out;
    const int64_t zero = 0, one = 1, minus = -1, big = g.nr;
    expect_invalid([&] { nest::shortest_path_dags(g.view(), &big, &zero, &one, 1, out); }, "row out of range");
    expect_invalid([&] { nest::shortest_path_dags(g.view(), &zero, &minus, &one, 1, out); }, "negative source");
    expect_invalid([&] { nest::shortest_path_dags(g.view(), &zero, &zero, &big, 1, out); }, "target out of range");
    expect_invalid([&] { nest::shortest_path_dags(g.view(), &zero, &zero, &zero, 1, out); }, "a pair s -> s");
    std::vector<int64_t> ptr = {0, 1};
    std::vector<int32_t> edge = {0};
    std::vector<double> frac = {1.0}, amount = {1.0, 1.0}, capacity = {1.0, 1.0}, ratio(2);
    nest::DagEntries d;
    d.ptr = ptr.data();
    d.pairs = 1;
    d.edge = edge.data();
    d.frac = frac.data();
    d.entries = 1;
    std::vector<int64_t> ids = {0, 0}, labels = {0, 1}, bad_ids = {0, 1}, bad_labels = {1, 0}, far = {0, 2};
    expect_invalid([&] { nest::label_ratios(d, bad_ids.data(), amount.data(), labels.data(), 2, 2, capacity.data(),
                                            2, ratio.data()); }, "a pair id out of range");
    expect_invalid([&] { nest::label_ratios(d, ids.data(), amount.data(), bad_labels.data(), 2, 2, capacity.data(),
                                            2, ratio.data()); }, "labels out of order");
    expect_invalid([&] { nest::label_ratios(d, ids.data(), amount.data(), far.data(), 2, 2, capacity.data(), 2,
                                            ratio.data()); }, "a label out of range");
    std::vector<int32_t> far_edge = {5};
    d.edge = far_edge.data();
    expect_invalid([&] { nest::label_ratios(d, ids.data(), amount.data(), labels.data(), 2, 2, capacity.data(), 2,
                                            ratio.data()); }, "an entry's link out of range");
    std::vector<int64_t> bad_ptr = {0, 3};
    d.edge = edge.data();
    d.ptr = bad_ptr.data();
    expect_invalid([&] { nest::label_ratios(d, ids.data(), amount.data(), labels.data(), 2, 2, capacity.data(), 2,
                                            ratio.data()); }, "entries beyond the store");
    std::vector<int32_t> indptr = {0, 1, 1}, indices = {1}, far_indices = {2};
    std::vector<double> weight = {1.0}, zero_weight = {0.0};
    nest::CsrGraph csr;
    csr.n = 2;
    csr.indptr = indptr.data();
    csr.indices = indices.data();
    csr.data = weight.data();
    csr.nnz = 1;
    std::vector<double> dist(2);
    expect_invalid([&] { nest::dijkstra_rows(csr, &big, 1, dist.data()); }, "a source out of range");
    csr.indices = far_indices.data();
    expect_invalid([&] { nest::dijkstra_rows(csr, &zero, 1, dist.data()); }, "a link's head out of range");
    csr.indices = indices.data();
    csr.data = zero_weight.data();
    expect_invalid([&] { nest::dijkstra_rows(csr, &zero, 1, dist.data()); }, "a weight that is not positive");
    std::vector<uint8_t> leaf = {1, 1};
    std::vector<double> caps = {1.0, 1.0}, lats = {0.0, 0.0}, access(2), latency(2);
    std::vector<int64_t> router_of = {0, 1}, src = {0, 1}, dst = {1, 0}, far_dst = {1, 2}, inverse(2);
    nest::AccessLinks acc;
    acc.leaf = leaf.data();
    acc.up_cap = acc.down_cap = caps.data();
    acc.up_lat = acc.down_lat = lats.data();
    acc.router_of = router_of.data();
    acc.devices = 2;
    acc.routers = 2;
    nest::RouterPairs pairs;
    expect_invalid([&] { nest::route_pairs(acc, src.data(), far_dst.data(), amount.data(), nullptr, 2, 1,
                                           ratio.data(), access.data(), inverse.data(), pairs); },
                   "a flow's device out of range");
    expect_invalid([&] { nest::route_pairs(acc, src.data(), dst.data(), amount.data(), far.data(), 2, 2,
                                           ratio.data(), access.data(), inverse.data(), pairs); },
                   "a flow's label out of range");
    acc.routers = 1;
    expect_invalid([&] { nest::route_pairs(acc, src.data(), dst.data(), amount.data(), nullptr, 2, 1,
                                           ratio.data(), access.data(), inverse.data(), pairs); },
                   "a device's router out of range");
    std::vector<int64_t> far_pair = {0, 4};
    expect_invalid([&] { nest::route_latency(nullptr, access.data(), far_pair.data(), 2, lats.data(), 1, 1,
                                             latency.data()); }, "a flow's pair out of range");
    std::vector<uint8_t> reserved = {0, 255, 255, 0};
    std::vector<int64_t> merges(3);
    expect_invalid([&] { nest::nn_chain_codes(reserved.data(), 2, merges.data()); }, "the reserved code 255");
}

}  // namespace

int main(int argc, char** argv) {
    const int64_t instances = argc > 1 ? std::atoll(argv[1]) : 2000;
    const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 20240601;
    std::mt19937_64 rng(seed);
    for (int64_t i = 0; i < instances; ++i) {
        check_dags(random_graph(rng), i);
        check_shares(rng, i);
        check_ratios(rng, i);
        check_dijkstra(rng, i);
        check_chain(rng, i);
        check_route_pairs(rng, i);
    }
    for (int64_t i = 0; i < 3; ++i) check_ratios(rng, instances + i, true);
    check_hostile();
    std::printf("routing_test: %lld checks, %lld failures\n", static_cast<long long>(g_checks),
                static_cast<long long>(g_failures));
    return g_failures == 0 ? 0 : 1;
}
