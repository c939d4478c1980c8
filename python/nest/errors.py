"""The two user-facing error types (exit codes 2 and 3 of the command line), and the framework-rule kind of bad input."""

from __future__ import annotations

import reprlib


class SpecError(ValueError):
    """Bad input: the message names the field and the offending value (CLI exit 2)."""


class RuleError(SpecError):
    """A configuration the job's framework cannot run: the message names the framework's
    rule, where the framework says it and the closest expressible change (CLI exit 2)."""


class InfeasibleError(RuntimeError):
    """No plan fits: the message gives the binding constraint (CLI exit 3)."""


class _ShortRepr(reprlib.Repr):
    """``repr`` bounded in size and depth, so that a hostile value (a YAML alias bomb
    whose full repr has billions of elements, a megabyte string) still gives a one-line
    message in microseconds. Scalars a user typed print exactly as ``repr`` does."""

    def __init__(self):
        super().__init__()
        self.maxlevel = 2
        self.maxtuple = self.maxlist = self.maxarray = self.maxset = self.maxfrozenset = self.maxdeque = 8
        self.maxdict = 8
        self.maxstring = 200
        self.maxlong = 60
        self.maxother = 200


_SHORT = _ShortRepr()


def short_repr(value) -> str:
    """``repr(value)`` cut to a few hundred characters (see :class:`_ShortRepr`); use it
    for values that come from user files in error messages."""
    return _SHORT.repr(value)


def require(condition: bool, field: str, value, expectation: str) -> None:
    """Raise :class:`SpecError` ``"<field> = <value>: <expectation>"`` unless ``condition``."""
    if not condition:
        raise SpecError(f"{field} = {short_repr(value)}: {expectation}")


def reject_unknown_keys(data: dict, known, where: str) -> None:
    """Raise :class:`SpecError` ``"<where>.<key> = <value>: unknown key (known: ...)"``
    for the first key of ``data`` (sorted) not in ``known``."""
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise SpecError(f"{where}.{unknown[0]} = {short_repr(data[unknown[0]])}: unknown key "
                        f"(known: {', '.join(sorted(known))})")


def non_empty_list(value, where: str) -> list:
    """``value`` if it is a non-empty list, else :class:`SpecError` naming ``where``."""
    if not isinstance(value, list) or not value:
        raise SpecError(f"{where} = {short_repr(value)}: must be a non-empty list")
    return value


def mappings(value, where: str):
    """``(where[i], entry)`` for each entry of the non-empty list ``value`` of mappings;
    :class:`SpecError` naming the list or the first entry that is not a mapping."""
    for i, entry in enumerate(non_empty_list(value, where)):
        here = f"{where}[{i}]"
        if not isinstance(entry, dict):
            raise SpecError(f"{here} = {short_repr(entry)}: must be a mapping")
        yield here, entry
