"""What nest prints: the text report (``text``), launch configs and rankfiles
(``export``), the schedule timeline (``timeline``, matplotlib) and progress bars
(``progress``)."""

from .._lazy import lazy_exports

_EXPORTS = {
    "FORMATS": ".export",
    "emit": ".export",
    "render": ".text",
    "render_simulation": ".text",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
__all__ = sorted(_EXPORTS)
