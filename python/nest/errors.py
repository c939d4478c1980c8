"""The two user-facing error types (DESIGN.md section 6)."""

from __future__ import annotations


class SpecError(ValueError):
    """Bad input: the message names the field and the offending value (CLI exit 2)."""


class InfeasibleError(RuntimeError):
    """No plan fits: the message gives the binding constraint (CLI exit 3)."""


def require(condition: bool, field: str, value, expectation: str) -> None:
    """Raise :class:`SpecError` ``"<field> = <value>: <expectation>"`` unless ``condition``."""
    if not condition:
        raise SpecError(f"{field} = {value!r}: {expectation}")
