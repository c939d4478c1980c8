"""Reading spec files: JSON or YAML mappings, with one-line SpecErrors naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from ..errors import SpecError, short_repr


def is_path(name: str) -> bool:
    """Whether a model/cluster argument names a file rather than a preset."""
    return name.endswith((".json", ".yaml", ".yml", ".graphml")) or "/" in name or Path(name).is_file()


def read_spec_file(path: str, what: str) -> dict:
    """Parse a JSON or YAML mapping, SpecError naming the file on any failure."""
    file = Path(path)
    if not file.is_file():
        raise SpecError(f"{what} = {short_repr(path)}: no such file")
    try:
        text = file.read_text()
        data = json.loads(text) if file.suffix == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, RecursionError, json.JSONDecodeError, yaml.YAMLError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise SpecError(f"{what} = {short_repr(path)}: cannot parse: {reason}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{what} = {short_repr(path)}: must contain a mapping, got {type(data).__name__}")
    return data


def read_json_object(path, what: str) -> dict:
    """Parse a JSON file holding an object; SpecError naming ``what`` and the file otherwise."""
    file = Path(path)
    if not file.is_file():
        raise SpecError(f"{what} = {short_repr(str(path))}: no such file")
    try:
        data = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, RecursionError, json.JSONDecodeError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise SpecError(f"{what} = {short_repr(str(path))}: not JSON: {reason}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{what} = {short_repr(str(path))}: must hold a JSON object, got {type(data).__name__}")
    return data
