// Whole-graph kernels of nest.network that scipy runs otherwise: Dijkstra distance rows
// (python/nest/network/paths.py DistanceRows, graph.py _host_distances) and the
// complete-linkage nearest-neighbour chain on byte codes of distances
// (python/nest/network/linkage.py nn_chain_complete).
//
// Both return exactly what the code they replace returns: a Dijkstra distance is the
// unique fixed point d(v) = min over links u -> v of d(u) + w (positive weights, each sum
// rounded once, as scipy.sparse.csgraph.dijkstra takes it), whatever order the vertices
// are settled in; the chain makes the choices of linkage.py step by step.
#pragma once

#include <cstdint>

namespace nest {

// A directed graph in CSR form (scipy.sparse.csr_matrix: row u's links are
// indices[indptr[u]] .. indices[indptr[u + 1] - 1] with weights data[...]).
struct CsrGraph {
    int64_t n = 0;
    const int32_t* indptr = nullptr;  // [n + 1]
    const int32_t* indices = nullptr;  // [nnz]
    const double* data = nullptr;      // [nnz], positive
    int64_t nnz = 0;
};

// dist[i * n + v]: the least total weight of a path sources[i] -> v (+inf when there is
// none), rows computed in parallel when OpenMP is on. Throws std::invalid_argument on
// an out-of-range index or a weight that is not positive and finite.
void dijkstra_rows(const CsrGraph& g, const int64_t* sources, int64_t count, double* dist);

// The nearest-neighbour chain of complete linkage over n points whose distance d(i, j)
// has rank codes[i * n + j] (symmetric; the diagonal is not read; 255 is reserved):
// per merge k, z[3k] = x < z[3k + 1] = y (the merged clusters; the union keeps y's
// index) and z[3k + 2] the code of their distance, in the order the chain merges them.
// `codes` is overwritten. Ties as linkage.py (and scipy's nn_chain): the first cluster
// index holding the smallest code, the chain's previous cluster when it holds it.
void nn_chain_codes(uint8_t* codes, int64_t n, int64_t* z);

}  // namespace nest
