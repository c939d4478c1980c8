"""nest's compiled stage DP, pipeline schedule and routing kernels (private: use
:mod:`nest.dp.engine` and :mod:`nest.network.kernels`)."""

import numpy as np
import numpy.typing as npt

Int64 = npt.NDArray[np.int64]
Float64 = npt.NDArray[np.float64]
Int32 = npt.NDArray[np.int32]
Float32 = npt.NDArray[np.float32]

def solve(time_ps: Int64, params: Int64, mem_params: Int64, act_bytes: Int64, send_ps: Int64, cand_config: Int64,
          cand_scale: Int64, cand_offset: Int64, cand_head_scale: Int64, cand_mem_fixed: Float64,
          cand_mem_per_param: Float64, cand_g0: Float64, cand_g1: Float64, cand_lower_bound: Int64,
          pos_offset: Int64, pos_inflight: Float64, pos_mem_fixed: Float64, pos_tier: Int64, capacity: float,
          threads: int = 0, host_params: Int64 | None = None, cand_host_per_param: Float64 | None = None,
          host_capacity: float = 0.0) -> tuple[Int64, Int64, Int64, Int64, Int64, int]:
    """The stage DP of every candidate (see nest.dp.problem): status, objective, max stage
    time, max stage parameters, stage ends, best candidate. Without host tables nothing
    is offloaded."""

def pipeline_finish(pp: int, vp: int, micro_batches: int, forward: Float64, recompute: Float64, backward: Float64,
                    send_forward: Float64, send_backward: Float64) -> Float64:
    """Per pipeline rank, the end of its last task in Megatron-LM's (interleaved) 1F1B order."""

def shortest_path_dags(dist: Float32, row: Int64, source: Int64, target: Int64, in_ptr: Int64, eu: Int64, ev: Int64,
                       ecost: Float64, elat: Float64, mul_tail: Float64, mul_head: Float64
                       ) -> tuple[Int64, Int64, Float64, Float64]:
    """Shortest-path DAGs of router pairs with their ECMP shares: (counts, links, fracs, lats)
    (nest.network.paths.compute_dags)."""

def label_ratios(ptr: Int64, edge: Int32, frac: Float64, ids: Int64, amount: Float64, label: Int64, nlabels: int,
                 capacity: Float64, cell: Int32 | None = None, shift: Int64 | None = None,
                 cell_link: Int32 | None = None) -> Float64:
    """Per label, the largest load / capacity of a link under concurrent flows over stored
    DAGs (nest.network.paths._ratios)."""

def route_pairs(src: Int64, dst: Int64, amount: Float64, label: Int64 | None, nlabels: int, leaf: npt.NDArray[np.uint8],
                up_cap: Float64, down_cap: Float64, up_lat: Float64, down_lat: Float64, router_of: Int64,
                routers: int, mode: int) -> tuple[Float64, Float64, Int64, Int64, Int64, Float64, Int64]:
    """The access-link ratios per label and the router pairs of a set of flows: (ratio,
    access_lat, inverse, source, target, amount, label) (nest.network.routing.route)."""

def route_latency(label: Int64 | None, access_lat: Float64, inverse: Int64, pair_lat: Float64,
                  nlabels: int) -> Float64:
    """Per label, the longest latency of its flows (nest.network.routing.route)."""

def dijkstra_rows(indptr: Int32, indices: Int32, data: Float64, sources: Int64) -> Float64:
    """Least path weights from each source over a CSR graph (scipy.sparse.csgraph.dijkstra's
    floats), [sources, n]."""

def nn_chain_codes(codes: npt.NDArray[np.uint8]) -> Int64:
    """Complete-linkage nearest-neighbour chain on byte codes of distances (overwritten):
    [(x, y, code)] per merge in chain order (nest.network.linkage)."""

def has_openmp() -> bool:
    """Whether the core was compiled with OpenMP."""

def max_threads() -> int:
    """Default thread count of the core (1 without OpenMP)."""

def default_threads(work: int) -> int:
    """Threads solve() uses by default on a batch of ``work`` DP cells (1 for small batches)."""
