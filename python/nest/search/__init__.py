"""The search: the joint space (``space``), lower bounds (``floors``), the stage DP's
tables of priced candidates (``problems``), the exact search (``search``) and why a job
does not fit (``diagnose``)."""

from .._lazy import lazy_exports

# Eager: importing the submodule 'search' binds its name on this package, which would
# shadow a lazy function of the same name.
from .search import search as search

_EXPORTS = {
    "PartialSpace": ".space",
    "RANKINGS": ".search",
    "SearchOutcome": ".search",
    "enumerate_partials": ".space",
    "expand": ".space",
    "polish": ".search",
    "polish_split": ".search",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
__all__ = sorted([*_EXPORTS, "search"])
