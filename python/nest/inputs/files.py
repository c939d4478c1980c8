"""Reading input files safely, and checking output paths before the work.

Every input file nest reads (model, device, cluster, graph, profile, instance, grid) goes
through :func:`read_text`, which makes one-line :class:`SpecError` messages of whatever a
hostile path or file can do:

* only regular files are read: a directory, FIFO, socket or device (``/dev/zero``) is
  refused after a ``stat``, before it is opened (and the descriptor is checked again after
  ``open``, which never blocks: ``O_NONBLOCK``);
* the file's size is bounded (:data:`MAX_SPEC_BYTES`, :data:`MAX_GRAPH_BYTES`): a larger
  file is refused without reading it, and at most the bound plus one byte is ever read
  (files under ``/proc`` report size 0, a file may grow while it is read);
* text is UTF-8 (a leading byte-order mark is dropped); anything else is refused naming
  the first bad byte and its offset;
* a name over 255 bytes (``ENAMETOOLONG``), a NUL in a name, a permission error or any
  other ``OSError`` of ``stat``/``open``/``read`` is one line naming the path.

JSON and YAML mappings must not repeat a key, at any depth (:func:`parse_json`,
:func:`parse_yaml`): a repeated key is an error naming it (and its line in YAML) instead
of the last value silently winning. YAML merge keys (``<<: *base``) still let a
mapping override what it merges.
"""

from __future__ import annotations

import codecs
import errno
import functools
import json
import os
import stat
from pathlib import Path

from ..errors import SpecError, short_repr

MAX_SPEC_BYTES = 64 * 2**20
"""Largest model, device, cluster, profile, instance, grid or Hugging Face config file
(64 MiB). Real ones take kilobytes (a profile of :data:`nest.inputs.profiles.MAX_NODES`
nodes about 25 MB per measurement); the bound keeps a stray log, dump or ``/proc`` file
from being parsed into gigabytes of objects."""

MAX_GRAPH_BYTES = 256 * 2**20
"""Largest network graph file (256 MiB), also for cluster files (which may hold a graph).
GraphML, the most verbose format, spends about 500 bytes per device (the 8192-device
``h100-fattree`` takes 4 MiB, as node-link JSON 2.5 MiB): 256 MiB hold half a million
devices, beyond the largest clusters built. Parsing costs about 25 bytes of memory per
byte of GraphML (the 4 MiB file: 100 MB), so the bound also caps that at a few GB, which
a graph of that size needs anyway; the 64 MiB of :data:`MAX_SPEC_BYTES` would stop at
about 130 000 devices."""

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _label(what: str, path) -> str:
    return f"{what} = {short_repr(str(path))}"


def _os_reason(error: OSError) -> str:
    """A short reason for an ``OSError`` of ``stat``/``open``/``read``."""
    if error.errno == errno.ENOENT:
        return "no such file"
    if error.errno == errno.ENAMETOOLONG:
        return "file name too long (a name of more than 255 bytes, or a path of more than 4095)"
    return error.strerror.lower() if error.strerror else str(error)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a file")


def _stat(path, label: str) -> os.stat_result:
    try:
        return os.stat(path)
    except OSError as error:
        raise SpecError(f"{label}: {_os_reason(error)}") from None
    except ValueError:  # an embedded NUL byte
        raise SpecError(f"{label}: not a file name (contains a NUL byte)") from None


def _size(limit: int) -> str:
    return f"{limit // 2**20} MiB" if limit % 2**20 == 0 else f"{limit} bytes"


def _check_regular(info: os.stat_result, limit: int, label: str) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise SpecError(f"{label}: not a regular file ({_kind(info.st_mode)})")
    if info.st_size > limit:
        raise SpecError(f"{label}: too large ({info.st_size} bytes; at most {_size(limit)})")


def read_bytes(path, what: str, limit: int = MAX_SPEC_BYTES) -> bytes:
    """The content of the regular file ``path`` of at most ``limit`` bytes; SpecError
    ``"<what> = <path>: <reason>"`` otherwise (see the module docstring)."""
    label = _label(what, path)
    _check_regular(_stat(path, label), limit, label)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as error:
        raise SpecError(f"{label}: {_os_reason(error)}") from None
    try:
        _check_regular(os.fstat(fd), limit, label)  # replaced between stat and open
        with os.fdopen(fd, "rb") as file:
            fd = -1
            data = file.read(limit + 1)
    except OSError as error:
        raise SpecError(f"{label}: {_os_reason(error)}") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > limit:
        raise SpecError(f"{label}: too large (more than {_size(limit)})")
    return data


def decode_text(data: bytes, what: str, path) -> str:
    """``data`` as UTF-8 text without a leading byte-order mark; SpecError naming the first
    byte that is not UTF-8 and its offset in the file."""
    skip = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[skip:].decode("utf-8")
    except UnicodeDecodeError as error:
        offset = skip + error.start
        raise SpecError(f"{_label(what, path)}: not UTF-8 text (byte {data[offset]:#04x} at offset {offset})") from None


def read_text(path, what: str, limit: int = MAX_SPEC_BYTES) -> str:
    """The UTF-8 text of the regular file ``path`` (:func:`read_bytes`, :func:`decode_text`)."""
    return decode_text(read_bytes(path, what, limit), what, path)


def is_path(name: str) -> bool:
    """Whether a model/cluster argument names a file rather than a preset: it has a file
    suffix or a ``/``, or something other than a directory has that name (a FIFO named
    like that is then refused as not a regular file, not taken for a preset)."""
    if name.endswith((".json", ".yaml", ".yml", ".graphml")) or "/" in name:
        return True
    try:
        return not stat.S_ISDIR(os.stat(name).st_mode)
    except (OSError, ValueError):
        return False


class _DuplicateKey(Exception):
    def __init__(self, key, line: int | None = None):
        super().__init__(key)
        self.key, self.line = key, line

    def message(self, label: str) -> str:
        where = f" (line {self.line})" if self.line is not None else ""
        return f"{label}: duplicate key {short_repr(self.key)}{where}: give each key once"


def _unique_pairs(pairs: list) -> dict:
    """``object_pairs_hook`` of :func:`json.loads`: a dict, refusing a repeated key."""
    data = {}
    for key, value in pairs:
        if key in data:
            raise _DuplicateKey(key)
        data[key] = value
    return data


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0].split("; use sys.set_int_max_str_digits")[0] if text else type(error).__name__


def parse_json(text: str, what: str, path, failure: str = "not JSON"):
    """The JSON value of ``text`` (objects without repeated keys); SpecError
    ``"<what> = <path>: <failure>: <reason>"`` when it does not parse."""
    label = _label(what, path)
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs)
    except _DuplicateKey as duplicate:
        raise SpecError(duplicate.message(label)) from None
    except RecursionError:
        raise SpecError(f"{label}: {failure}: nested too deeply") from None
    except ValueError as error:  # JSONDecodeError, integers of more than 4300 digits
        raise SpecError(f"{label}: {failure}: {_first_line(error)}") from None


@functools.cache
def _unique_key_loader():
    """The YAML loader class, built on first use: importing PyYAML costs every command
    that reads no YAML file (issue 19)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        """``yaml.SafeLoader`` that refuses a key repeated in one mapping, at any depth.

        The check runs when a mapping node is first flattened (from ``construct_mapping``,
        or as the target of a merge key, whichever comes first), on the node's own keys: the
        keys a ``<<`` merge brings in may be overridden, as YAML intends."""

        def __init__(self, stream):
            super().__init__(stream)
            self._checked = set()

        def flatten_mapping(self, node):
            if id(node) not in self._checked:
                self._checked.add(id(node))
                seen = set()
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node)
                    try:
                        duplicate = key in seen
                    except TypeError:  # an unhashable key: construct_mapping reports it
                        continue
                    if duplicate:
                        raise _DuplicateKey(key, key_node.start_mark.line + 1)
                    seen.add(key)
            super().flatten_mapping(node)

    return UniqueKeyLoader


def parse_yaml(text: str, what: str, path, failure: str = "not YAML"):
    """The YAML value of ``text`` (safe tags only, mappings without repeated keys);
    SpecError ``"<what> = <path>: <failure>: <reason>"`` when it does not parse."""
    import yaml

    label = _label(what, path)
    try:
        return yaml.load(text, Loader=_unique_key_loader())  # noqa: S506 - a SafeLoader
    except _DuplicateKey as duplicate:
        raise SpecError(duplicate.message(label)) from None
    except RecursionError:
        raise SpecError(f"{label}: {failure}: nested too deeply") from None
    except (yaml.YAMLError, ValueError) as error:  # ValueError: integers of more than 4300 digits
        raise SpecError(f"{label}: {failure}: {_first_line(error)}") from None


def read_spec_file(path: str, what: str, limit: int = MAX_SPEC_BYTES) -> dict:
    """Parse a JSON (``.json``) or YAML mapping, SpecError naming the file on any failure."""
    text = read_text(path, what, limit)
    if Path(path).suffix == ".json":
        data = parse_json(text, what, path, "cannot parse")
    else:
        data = parse_yaml(text, what, path, "cannot parse")
    if not isinstance(data, dict):
        raise SpecError(f"{_label(what, path)}: must contain a mapping, got {type(data).__name__}")
    return data


def read_json_object(path, what: str) -> dict:
    """Parse a JSON file holding an object; SpecError naming ``what`` and the file otherwise."""
    data = parse_json(read_text(path, what), what, path)
    if not isinstance(data, dict):
        raise SpecError(f"{_label(what, path)}: must hold a JSON object, got {type(data).__name__}")
    return data


def check_writable(path: str, flag: str) -> None:
    """SpecError ``"<flag> = <path>: ..."`` unless nest can write the output file ``path``:
    it names no directory or other non-regular file, its directory exists and is writable
    (or the file exists and is writable). Checked before the work, without opening or
    creating anything (``stat`` and ``os.access`` only)."""
    label = _label(flag, path)
    if not path:
        raise SpecError(f"{label}: an empty file name")
    try:
        info = os.stat(path)
    except ValueError:
        raise SpecError(f"{label}: not a file name (contains a NUL byte)") from None
    except OSError as error:
        if error.errno != errno.ENOENT:
            raise SpecError(f"{label}: cannot write: {_os_reason(error)}") from None
        info = None
    if info is not None:
        if not stat.S_ISREG(info.st_mode):
            raise SpecError(f"{label}: cannot write: {_kind(info.st_mode)}, not a regular file")
        if not os.access(path, os.W_OK):
            raise SpecError(f"{label}: cannot write: the file is not writable")
        return
    directory = os.path.dirname(path) or "."
    try:
        parent = os.stat(directory)
    except OSError as error:
        reason = {errno.ENOENT: "does not exist", errno.ENOTDIR: "is not a directory"}.get(
            error.errno, f"cannot be used: {_os_reason(error)}")
        raise SpecError(f"{label}: cannot write: directory {short_repr(directory)} {reason}") from None
    if not stat.S_ISDIR(parent.st_mode):
        raise SpecError(f"{label}: cannot write: {short_repr(directory)} is not a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise SpecError(f"{label}: cannot write: directory {short_repr(directory)} is not writable")
