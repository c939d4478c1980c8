"""Unit constants. Everything inside nest is SI (seconds, bytes, FLOP/s, bytes/s); these
convert at the edges (file formats, reports) and to the stage DP's integer units. No
numpy at import: the command line reads these before a command needs it."""

GiB = 2**30
"""Bytes per gibibyte."""

MiB = 2**20
"""Bytes per mebibyte."""

GB = 1e9
"""Bytes per gigabyte (network and HBM bandwidths are given in GB/s)."""

PS = 1e12
"""Picoseconds per second: the stage DP's integer time unit."""


def to_ps(seconds):
    """Seconds to integer picoseconds (round half up), as an int64 array."""
    import numpy as np

    return np.floor(np.asarray(seconds, dtype=np.float64) * PS + 0.5).astype(np.int64)
