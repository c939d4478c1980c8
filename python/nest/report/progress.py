"""A plain-text progress bar on stderr (done/total, rate, ETA), quiet when asked."""

from __future__ import annotations

import math
import sys
import time


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "--"
    seconds = int(seconds + 0.5)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


class Progress:
    """A plain-text progress bar on ``stream`` (stderr): done/total, rate, ETA."""

    def __init__(self, total: int, done: int = 0, stream=None, quiet: bool = False, width: int = 30,
                 delay_s: float = 0.0, tty_only: bool = False):
        """``delay_s``: nothing is shown before that much time has passed (work that ends
        sooner prints nothing); ``tty_only``: quiet unless ``stream`` is a terminal."""
        self.total, self.start_done, self.done = total, done, done
        self.stream = sys.stderr if stream is None else stream
        self.width, self.delay_s = width, delay_s
        self.started = time.perf_counter()
        self._last = 0.0
        self._tty = getattr(self.stream, "isatty", lambda: False)()
        self.quiet = quiet or (tty_only and not self._tty)
        self._shown = False

    def line(self) -> str:
        elapsed = time.perf_counter() - self.started
        ran = self.done - self.start_done
        rate = ran / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        filled = int(self.width * self.done / self.total) if self.total else self.width
        return (f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} "
                f"{rate:.1f}/s ETA {_duration(eta)}")

    def update(self, n: int = 1) -> None:
        self.done += n
        if self.quiet:
            return
        now = time.perf_counter()
        if now - self.started < self.delay_s:
            return
        if self.done < self.total and now - self._last < (0.1 if self._tty else 5.0):
            return
        self._last, self._shown = now, True
        self.stream.write(("\r" + self.line()) if self._tty else self.line() + "\n")
        self.stream.flush()

    def close(self) -> None:
        if not self.quiet and (self._shown or not self.delay_s):
            if self._tty:
                self.stream.write("\r" + self.line() + "\n")
            elif self._last == 0.0 or self.done < self.total:
                self.stream.write(self.line() + "\n")
            self.stream.flush()
