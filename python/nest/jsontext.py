"""``json.dumps(obj, indent=2)``, character for character, faster.

With an indent, the standard library encodes in pure Python through nested generators
(its C encoder serves only compact output): about 1 s for the document of a 16384-device
plan (one entry per rank). :func:`dumps_indented` writes the same text with one recursive
function: containers of scalars only (most of a plan: one per rank) by the C encoder
with the item separator of their level (``",\n"`` and the indent), the others item by
item with the same scalars (``float.__repr__``, ``int.__repr__``, the C string encoder,
``NaN``/``Infinity``), key conversions and layout. Anything else (types ``json`` would
pass to ``default`` and reject, keys it would reject) is handed to ``json.dumps`` itself,
which then raises what it raises.
"""

from __future__ import annotations

import json
from json.encoder import c_make_encoder, encode_basestring_ascii

_INF = float("inf")


class _Unsupported(Exception):
    """A value the fast path does not write (``json.dumps`` decides)."""


def _float(o: float) -> str:
    if o != o:
        return "NaN"
    if o == _INF:
        return "Infinity"
    if o == -_INF:
        return "-Infinity"
    return float.__repr__(o)


def _scalar(o) -> str:
    """The text of a non-container value, in the order of checks of ``json``'s encoder."""
    if isinstance(o, str):
        return encode_basestring_ascii(o)
    if o is None:
        return "null"
    if o is True:
        return "true"
    if o is False:
        return "false"
    if isinstance(o, int):
        return int.__repr__(o)
    if isinstance(o, float):
        return _float(o)
    raise _Unsupported


def _key(k) -> str:
    """A dict key as ``json`` writes it: a string, or the text of the scalar it converts."""
    return encode_basestring_ascii(k if isinstance(k, str) else _scalar(k))


def _reject(o):
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


def _flat_encoder(separator: str):
    """``o -> text`` of a container with ``separator`` between items: the C encoder made
    once (``JSONEncoder.encode`` would make it again per call), as ``json.dumps`` configures
    it apart from the separator and the circular check (a container of scalars has no
    cycle)."""
    if c_make_encoder is None:  # pragma: no cover - CPython always has it
        return json.JSONEncoder(separators=(separator, ": ")).encode
    encode = c_make_encoder(None, _reject, encode_basestring_ascii, None, ": ", separator, False, False, True)
    return lambda o: "".join(encode(o, 0))


def dumps_indented(obj, indent: int = 2) -> str:
    """``json.dumps(obj, indent=indent)`` (default separators, ``ensure_ascii``, NaN allowed,
    keys unsorted)."""
    parts: list[str] = []
    add = parts.append
    flat: dict = {}  # per level: the encoder of its flat containers

    def write_flat(o, level: int, inner: str) -> bool:
        """A container of scalars only, written by the C encoder with the item separator
        of its level (what the indented layout puts between items)."""
        for v in (o.values() if isinstance(o, dict) else o):
            if isinstance(v, (list, tuple, dict)):
                return False
        encoder = flat.get(level)
        if encoder is None:
            encoder = flat[level] = _flat_encoder("," + inner)
        text = encoder(o)
        add(text[0] + inner + text[1:-1] + "\n" + " " * (indent * level) + text[-1])
        return True

    def write(o, level: int) -> None:
        if not isinstance(o, (list, tuple, dict)):
            add(_scalar(o))
            return
        opening, closing = ("{", "}") if isinstance(o, dict) else ("[", "]")
        if not o:
            add(opening + closing)
            return
        inner = "\n" + " " * (indent * (level + 1))
        if write_flat(o, level, inner):
            return
        # (what precedes each value, the value): a dict's key, nothing in a list
        items = ((_key(k) + ": ", v) for k, v in o.items()) if isinstance(o, dict) else (("", v) for v in o)
        add(opening)
        separator = inner
        for label, value in items:
            add(separator + label)
            separator = "," + inner
            write(value, level + 1)
        add("\n" + " " * (indent * level) + closing)

    try:
        write(obj, 0)
    except (_Unsupported, RecursionError, TypeError, ValueError):
        return json.dumps(obj, indent=indent)
    return "".join(parts)
