"""Expert load imbalance of dropless routing: the busiest expert-parallel rank's tokens.

A learned router does not give every expert the same tokens in a micro-batch. With
dropless routing every expert-parallel rank computes what it receives, and every rank
waits for the others at the next dispatch or combine, so a MoE layer runs at the pace of
its busiest rank: its expert GEMMs, the tokens it sorts by expert and the all-to-all bytes
it receives (dispatch) and sends back (combine) are the mean's times a load factor.

The model: the tokens of the ``E`` experts in one micro-batch have a coefficient of
variation ``cv`` (``JobSpec.moe_load_cv``; 0 is balanced routing, what Megatron-Core's
``--moe-router-force-load-balancing`` enforces and what published MoE benchmarks run:
Megatron-Bridge's performance summary "force-balance[s] the token distribution among
experts", the Megatron-Core MoE report's Table 11 "All configurations use
force-balanced routing"). A rank holds ``L = E / ep`` experts, a draw without
replacement whose total is fixed, so its load has the coefficient of variation
``cv sqrt((E - L) / (L (E - 1)))``; the busiest of ``ep`` ranks then carries ``1 +
cv_rank z(ep)`` times the mean, ``z(n)`` the expected maximum of ``n`` independent
standard normal variables, at most all ``ep`` ranks' tokens. A capacity factor caps it:
drop-and-pad computes exactly the capacity (:meth:`nest.cost.activations.Activations.expert_padding`),
a dropping flex dispatcher at most the capacity.

How large ``cv`` is depends on the router and the data, not on the hardware. Measured
(Megatron-Core's MoE model zoo, ``best_practice/qwen3/readme.md`` at e865051, 256 H100,
Qwen3-235B-A22B from its checkpoint, aux-loss router): forced balance 295 TFLOP/s per
GPU, dropless 237 at 16k tokens (1.245x), 389 / 357 at 128k; Mixtral-8x22B
(``best_practice/mixtral/run_mixtral_8x22B.sh``) 465 / 445 (1.045x). ``docs/cost-model.md``
gives the ``cv`` these gaps correspond to under this model.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np


@lru_cache(maxsize=1)
def _normal_grid() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``x`` on [-9, 9] and the standard normal density and distribution function there."""
    x = np.linspace(-9.0, 9.0, 18001)
    phi = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1.0 + np.array([math.erf(v / math.sqrt(2)) for v in x.tolist()]))
    return x, phi, cdf


@lru_cache(maxsize=None)
def expected_max_normal(n: int) -> float:
    """The expected maximum of ``n`` independent standard normal variables (0 for one):
    ``integral x n phi(x) Phi(x)^(n-1) dx``, by the trapezoidal rule."""
    if n <= 1:
        return 0.0
    x, phi, cdf = _normal_grid()
    f = x * n * phi * cdf ** (n - 1)
    return float(np.sum((f[1:] + f[:-1]) * np.diff(x)) / 2)


def rank_load_factor(cv: float, experts: int, ep, capacity: float = 0.0) -> np.ndarray:
    """The busiest expert-parallel rank's tokens over the mean rank's, per entry of ``ep``
    (elementwise; see the module docstring); ``capacity`` > 0 caps it (a dropping
    dispatcher)."""
    ep = np.asarray(ep, dtype=np.int64)
    if cv <= 0 or not experts:
        return np.ones(ep.shape)
    local = experts / np.maximum(ep, 1)
    spread = np.where(experts > 1, cv * np.sqrt(np.maximum(experts - local, 0.0) / (local * max(experts - 1, 1))),
                      0.0)
    z = np.vectorize(expected_max_normal, otypes=[np.float64])(ep)
    factor = np.minimum(1.0 + spread * z, np.maximum(ep, 1).astype(np.float64))
    return np.minimum(factor, capacity) if capacity > 0 else factor
