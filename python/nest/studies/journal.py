"""The sweep's output: an append-only JSONL journal (what a rerun resumes from) and the
table written from it (CSV or Parquet), never half-written."""

from __future__ import annotations

import json
import os
from pathlib import Path


def journal_path(out: str | os.PathLike) -> Path:
    out = Path(out)
    return out if out.suffix == ".jsonl" else out.with_name(out.name + ".jsonl")


def read_journal(path: Path) -> dict[str, dict]:
    """Rows by id; a torn last line (a kill mid-write) is cut off the file."""
    rows: dict[str, dict] = {}
    if not path.exists():
        return rows
    with open(path, "rb+") as f:
        data = f.read()
        keep = data.rfind(b"\n") + 1
        if keep != len(data):
            f.truncate(keep)
            f.flush()
            os.fsync(f.fileno())
    for line in data[:keep].splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and "id" in row:
            rows.setdefault(row["id"], row)
    return rows


class Journal:
    """Append-only JSONL: one line per row, flushed and fsync'ed before returning."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(path, "ab")

    def append(self, row: dict) -> None:
        self._f.write((json.dumps(row, default=str) + "\n").encode())
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


def columns(rows: list[dict]) -> list[str]:
    """The table's columns: every key of any row, in first-seen order."""
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row))
    return list(names)


def write_table(rows: list[dict], out: Path) -> None:
    """Write the whole table (.csv or .parquet) to a temporary file, then os.replace."""
    import csv

    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    header = columns(rows)
    if out.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table({c: [r.get(c) for r in rows] for c in header}) if rows else pa.table({})
        pq.write_table(table, tmp)
    else:
        with open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=header, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, out)
