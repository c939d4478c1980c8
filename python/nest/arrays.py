"""Set operations on integer arrays without ``np.unique``'s start-up cost.

numpy's ``unique`` (and ``isin`` and ``setdiff1d``, which call it) probes its argument with
``np.ma.is_masked``, which imports ``numpy.ma`` on first use: about 12 ms of a ``nest
plan`` process that never uses masked arrays (issue 19). These give the same arrays
for the search's integer columns and float fractions.
"""

from __future__ import annotations

import numpy as np


def unique(values) -> np.ndarray:
    """The sorted distinct values of a 1-D array (``np.unique(values)``)."""
    values = np.sort(np.asarray(values).ravel())
    if not len(values):
        return values
    return values[np.concatenate(([True], values[1:] != values[:-1]))]


def isin(values, options) -> np.ndarray:
    """Per entry of ``values``, whether it is one of ``options`` (``np.isin``)."""
    values, options = np.asarray(values), unique(options)
    if not len(options):
        return np.zeros(values.shape, dtype=bool)
    at = np.minimum(np.searchsorted(options, values), len(options) - 1)
    return options[at] == values


def setdiff(values, others) -> np.ndarray:
    """The sorted distinct values of ``values`` that are not in ``others``
    (``np.setdiff1d``)."""
    values = unique(values)
    return values[~isin(values, others)]


def distinct_rows(*columns) -> tuple[np.ndarray, np.ndarray]:
    """``(first, inverse)`` of the rows formed by equal-length 1-D integer columns:
    ``first`` the index of each distinct row's first occurrence, ``inverse`` each row's
    position in ``first`` (so ``column[first][inverse]`` is ``column``)."""
    columns = [np.asarray(c) for c in columns]
    n = len(columns[0])
    order = np.lexsort(columns[::-1])  # stable: equal rows keep their order
    starts = np.zeros(n, dtype=bool)
    if n:
        starts[0] = True
        for column in columns:
            ordered = column[order]
            starts[1:] |= ordered[1:] != ordered[:-1]
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.cumsum(starts) - 1
    return order[starts], inverse
