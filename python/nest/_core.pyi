"""nest's compiled stage DP and pipeline schedule (private: use :mod:`nest.dp.engine`)."""

import numpy as np
import numpy.typing as npt

Int64 = npt.NDArray[np.int64]
Float64 = npt.NDArray[np.float64]

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

def has_openmp() -> bool:
    """Whether the core was compiled with OpenMP."""

def max_threads() -> int:
    """Default thread count of the core (1 without OpenMP)."""
