"""The cost model: what a node of the layer graph costs on one device, and what a
candidate's nodes cost on its placement.

Modules: ``model`` (the layer graph and parameters per device), ``efficiency`` and
``compute`` (kernel times on a device), ``nodes`` (the columnar node cost model),
``scenario`` (a model, a cluster and a job with their cost tables), ``pricing`` (seconds
of candidates on their groups' prices, the end-of-step sync), ``memory_formulas``
(Megatron's published memory formulas, the reference the model is checked against).
"""

from .._lazy import lazy_exports

_EXPORTS = {
    "AnalyticSource": ".scenario",
    "COST_FIELDS": ".nodes",
    "ConfigTable": ".scenario",
    "KindTimes": ".pricing",
    "NodeCostModel": ".nodes",
    "OP_FIELDS": ".nodes",
    "Priced": ".pricing",
    "Scenario": ".scenario",
    "kind_times": ".pricing",
    "price": ".pricing",
    "price_candidate": ".pricing",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
__all__ = sorted(_EXPORTS)
