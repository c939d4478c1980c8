"""What nest prints: the text report (``text``), launch configs and rankfiles
(``export``), the schedule timeline (``timeline``, matplotlib) and progress bars
(``progress``)."""

from .export import FORMATS, emit
from .text import render, render_simulation

__all__ = ["FORMATS", "emit", "render", "render_simulation"]
