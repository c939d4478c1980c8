"""The sweep's output: an append-only JSONL journal (what a rerun resumes from), the table
written from it (CSV or Parquet, never half-written) and the lock that keeps one sweep
per output.

How nest recognises its own files (it never truncates, overwrites or appends to any
other file, and refuses with a :class:`~nest.errors.SpecError` naming the path instead):

* a journal's first line is its header, ``{"nest_sweep_journal": 1, "created": ...}``
  (:data:`MARKER`, :data:`VERSION`); every later line is one row, a JSON object with an
  ``id``. A journal is created whole with its header (written to a temporary file,
  then hard-linked into place, which never replaces an existing file), so an empty file
  or one without the header was not written by nest;
* a CSV table's header row starts ``id,model,cluster,devices`` and has only the columns
  nest writes (``known_column``); a Parquet table carries the schema metadata
  ``nest: sweep-table``;
* the lock ``<journal>.lock`` is empty or starts with ``nest sweep lock``.

The lock is an exclusive ``fcntl.flock`` held for the whole run, so a second sweep on
the same output refuses at once; the kernel releases it when the process ends, also on
``kill -9``. The file is removed on a normal exit (a crash leaves it behind, harmless:
the next run takes it over).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import stat
from pathlib import Path

from ..errors import SpecError, short_repr

MARKER = "nest_sweep_journal"
VERSION = 1
JOURNAL_ONLY = ("slot", "inputs")
"""Row keys kept in the journal only (not table columns): the scenario's place in the
grid and the digests of its inputs (see :mod:`nest.studies.sweep`)."""
_LOCK_TEXT = b"nest sweep lock"
_HEAD_BYTES = 65536  # a header line longer than this is not nest's
_TABLE_META = (b"nest", b"sweep-table")


def journal_path(out: str | os.PathLike) -> Path:
    out = Path(out)
    return out if out.suffix == ".jsonl" else out.with_name(out.name + ".jsonl")


def _regular(path: Path, what: str) -> bool:
    """Whether ``path`` exists (following links); SpecError if it is not a regular file
    (a directory, FIFO or device is never opened: reading one can block forever)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.lexists(path):
            raise SpecError(f"{what} = {str(path)!r}: a dangling symbolic link; nest will not write "
                            "through it") from None
        return False
    except OSError as error:
        raise SpecError(f"{what} = {str(path)!r}: {error.strerror}") from None
    if not stat.S_ISREG(mode):
        raise SpecError(f"{what} = {str(path)!r}: not a regular file; nest writes only its own files")
    return True


def _foreign(path: Path, what: str, why: str) -> SpecError:
    return SpecError(f"{what} = {str(path)!r}: {why}; nest never overwrites a file it did not write "
                     "(move it away or choose another --out)")


# -- the lock ---------------------------------------------------------------------------


class SweepLock:
    """Exclusive lock on ``<journal>.lock`` for the duration of a ``with`` block;
    SpecError at once if another sweep holds it."""

    def __init__(self, journal: Path, out: Path | str | None = None):
        journal = Path(journal)  # beside the journal; a directory is named by its real path
        self.path = Path(os.path.realpath(journal.parent)) / (journal.name + ".lock")
        self._parent = journal.parent
        self.out, self._fd = str(journal if out is None else out), None

    def __enter__(self):
        import fcntl

        flags = os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        while True:
            try:
                self._parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, flags, 0o644)
            except OSError as error:
                raise SpecError(f"out = {str(self.path)!r}: cannot create the sweep's lock file: "
                                f"{error.strerror}") from None
            try:
                info = os.fstat(fd)
                head = os.pread(fd, 64, 0) if stat.S_ISREG(info.st_mode) else b"?"
                if head and not head.startswith(_LOCK_TEXT):
                    raise _foreign(self.path, "out", "exists and is not a nest sweep lock file")
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    pid = re.search(rb"pid (\d+)", head)
                    who = f" (pid {pid.group(1).decode()})" if pid else ""
                    raise SpecError(f"out = {self.out!r}: another nest sweep{who} holds it "
                                    f"(lock {self.path.name}); wait for it to end or choose another --out") from None
                try:  # the file may have been removed by the sweep that held it: retry on the new one
                    same = os.stat(self.path, follow_symlinks=False).st_ino == info.st_ino
                except FileNotFoundError:
                    same = False
            except BaseException:
                os.close(fd)
                raise
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, _LOCK_TEXT + f"\npid {os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc):
        if self._fd is not None:
            try:
                os.unlink(self.path)  # while still held: a waiting sweep then retries on a new file
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None
        return False


# -- the journal ------------------------------------------------------------------------


def _header() -> bytes:
    created = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return (json.dumps({MARKER: VERSION, "created": created}) + "\n").encode()


def _check_header(line: bytes, path: Path, what: str) -> None:
    if not line.endswith(b"\n"):
        why = "is empty" if not line else "does not start with a nest journal header line"
        raise _foreign(path, what, f"{why}, so it is not a nest sweep journal")
    try:
        head = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise _foreign(path, what, "is not a nest sweep journal (its first line is not JSON)") from None
    if isinstance(head, dict) and MARKER in head:
        version = head[MARKER]
        if version != VERSION:
            raise SpecError(f"{what} = {str(path)!r}: a nest sweep journal of format {short_repr(version)}; "
                            f"this nest reads format {VERSION} (choose another --out)")
        return
    if isinstance(head, dict) and {"id", "status"} <= set(head):
        raise _foreign(path, what, "is a journal of an earlier nest (no header line; its scenario keys "
                                   "differ), so it cannot be resumed")
    raise _foreign(path, what, "is not a nest sweep journal (no nest header line)")


def read_journal(path: Path, notify=None, what: str = "journal", *, repair: bool = False) -> dict[str, dict]:
    """Rows by id (the first row of an id wins). SpecError if ``path`` is not a nest
    journal or a line other than the last is damaged (line number named: nest does not
    guess which scenarios it held). A torn last line (a kill or a full disk in the middle
    of a write: no newline at its end) is left out; with ``repair`` (only holding the
    :class:`SweepLock`: a running sweep may be writing that line) it is also cut off the
    file, with ``notify(message)``, and its scenario reruns."""
    path = Path(path)
    rows: dict[str, dict] = {}
    if not _regular(path, what):
        return rows
    with open(path, "rb+" if repair else "rb") as f:
        _check_header(f.readline(_HEAD_BYTES), path, what)
        number, good = 1, f.tell()
        for line in f:
            number += 1
            if not line.endswith(b"\n"):  # the last line, torn
                if not repair:
                    break
                f.truncate(good)
                f.flush()
                os.fsync(f.fileno())
                if notify is not None:
                    notify(f"{path}: dropped a torn last line (line {number}, {len(line)} bytes: a write "
                           "cut off by a kill or a full disk); its scenario reruns")
                break
            good += len(line)
            if not line.strip():
                continue
            try:
                row = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as error:
                kind = "not UTF-8" if isinstance(error, UnicodeDecodeError) else "not JSON"
                raise SpecError(f"{what} = {str(path)!r}: line {number} is damaged ({kind}); nest will not guess "
                                "what it held: repair or delete that line (or the journal, to rerun "
                                "everything)") from None
            if not isinstance(row, dict) or not isinstance(row.get("id"), str):
                raise SpecError(f"{what} = {str(path)!r}: line {number} is not a row (a JSON object with an id); "
                                "repair or delete that line (or the journal, to rerun everything)")
            rows.setdefault(row["id"], row)
    return rows


def saved_ids(path: Path) -> set[str]:
    """The ids of the complete rows in a nest journal, read only (how many scenarios an
    interrupted sweep saved: a Ctrl-C can fall between a row's write and its count)."""
    ids: set[str] = set()
    try:
        with open(path, "rb") as f:
            f.readline(_HEAD_BYTES)
            for line in f:
                try:
                    row = json.loads(line.decode("utf-8")) if line.endswith(b"\n") else None
                except (UnicodeDecodeError, ValueError):
                    continue
                if isinstance(row, dict) and isinstance(row.get("id"), str):
                    ids.add(row["id"])
    except OSError:
        pass
    return ids


def _write_new(path: Path, data: bytes, *, replace: bool) -> None:
    """``data`` into ``path`` whole: a temporary file, fsync, then a hard link (``replace``
    False: never over an existing file) or ``os.replace``."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise _foreign(path, "journal", "appeared while the sweep started") from None
            except OSError:  # no hard links on this file system: exclusive create
                with open(path, "xb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    _sync_dir(path.parent)


def _sync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def create_journal(path: Path) -> None:
    """A new journal holding only its header (SpecError if ``path`` appeared meanwhile)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_new(path, _header(), replace=False)


def rewrite_journal(path: Path, rows) -> None:
    """Replace the journal by a header and ``rows`` (atomically; dropping superseded rows)."""
    lines = [_header()] + [(json.dumps(row, default=str) + "\n").encode() for row in rows]
    _write_new(path, b"".join(lines), replace=True)


class Journal:
    """Append-only JSONL (an existing nest journal): one line per row, flushed and
    fsync'ed before returning."""

    def __init__(self, path: Path):
        self.path = path
        self._f = open(path, "ab")

    def append(self, row: dict) -> None:
        self._f.write((json.dumps(row, default=str) + "\n").encode())
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


def remove_leftovers(*paths: Path) -> None:
    """Remove the temporary files (``.<name>.tmp<pid>``) a killed sweep left beside
    ``paths`` (call it holding the lock: no other sweep writes them then)."""
    for path in paths:
        pattern = re.compile(rf"\.{re.escape(path.name)}\.tmp\d+")
        try:
            names = os.listdir(path.parent)
        except OSError:
            continue
        for name in names:
            if pattern.fullmatch(name):
                try:
                    os.unlink(path.parent / name)
                except OSError:
                    pass


# -- the table --------------------------------------------------------------------------

_LEADING = ("id", "model", "cluster", "devices")


def columns(rows: list[dict]) -> list[str]:
    """The table's columns: every key of any row, in first-seen order (journal-only keys
    left out)."""
    names: dict[str, None] = dict.fromkeys(_LEADING) if rows else {}
    for row in rows:
        names.update(dict.fromkeys(row))
    for key in JOURNAL_ONLY:
        names.pop(key, None)
    return list(names)


def check_table(out: Path, known_column) -> bool:
    """Whether the table ``out`` exists; SpecError if it is not a table nest wrote (a CSV
    whose header row is not nest's columns, a Parquet file without nest's metadata)."""
    if not _regular(out, "out"):
        return False
    if out.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            meta = pq.read_schema(out).metadata or {}
        except Exception:  # noqa: BLE001 - any unreadable file is not nest's table
            meta = None
        if meta is None or meta.get(_TABLE_META[0]) != _TABLE_META[1]:
            raise _foreign(out, "out", "is not a Parquet table nest wrote (no nest metadata)")
        return True
    import csv

    with open(out, "rb") as f:
        head = f.readline(_HEAD_BYTES)
    try:
        header = next(csv.reader([head.decode("utf-8")]), [])
    except (UnicodeDecodeError, csv.Error):
        header = []
    if tuple(header[:len(_LEADING)]) != _LEADING or "status" not in header \
            or not all(known_column(c) for c in header):
        raise _foreign(out, "out", "is not a table nest wrote (its header row is not nest's columns "
                                   f"{','.join(_LEADING)},...)")
    return True


def write_table(rows: list[dict], out: Path) -> None:
    """Write the whole table (.csv or .parquet) to a temporary file, then os.replace."""
    import csv

    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    header = columns(rows) or list(_LEADING) + ["status", "reason"]
    try:
        if out.suffix == ".parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.table({c: [r.get(c) for r in rows] for c in header})
            table = table.replace_schema_metadata(dict([_TABLE_META]))
            pq.write_table(table, tmp)
        else:
            with open(tmp, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=header, extrasaction="ignore")
                writer.writeheader()
                writer.writerows(rows)
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, out)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
