"""The search: the joint space (``space``), lower bounds (``floors``), the stage DP's
tables of priced candidates (``problems``), the exact search (``search``) and why a job
does not fit (``diagnose``)."""

from .search import RANKINGS, SearchOutcome, polish, polish_split, search
from .space import PartialSpace, enumerate_partials, expand

__all__ = ["RANKINGS", "PartialSpace", "SearchOutcome", "enumerate_partials", "expand", "polish", "polish_split", "search"]
