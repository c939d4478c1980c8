"""The cost model: what a node of the layer graph costs on one device, and what a
candidate's nodes cost on its placement.

Modules: ``model`` (the layer graph and parameters per device), ``efficiency`` and
``compute`` (kernel times on a device), ``nodes`` (the columnar node cost model),
``scenario`` (a model, a cluster and a job with their cost tables), ``pricing`` (seconds
of candidates on their groups' prices, the end-of-step sync), ``memory_formulas``
(Megatron's published memory formulas, the reference the model is checked against).
"""

from .nodes import COST_FIELDS, OP_FIELDS, NodeCostModel
from .pricing import KindTimes, Priced, kind_times, price, price_candidate
from .scenario import AnalyticSource, ConfigTable, Scenario

__all__ = ["COST_FIELDS", "OP_FIELDS", "AnalyticSource", "ConfigTable", "KindTimes", "NodeCostModel", "Priced",
           "Scenario", "kind_times", "price", "price_candidate"]
