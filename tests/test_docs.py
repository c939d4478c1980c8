"""The README and docs/ run as written: every command of their code blocks through the real
command line, every Python block executed, every spec-file example loaded, every JSON
example parsed, and every relative link pointing at a file of the repository.

Commands run in-process (:func:`nest.cli.main`) in a scratch directory where ``tests``
links to the repository's own ``tests`` (the sample files the docs name), so outputs
(``results.jsonl``, ``schedule.png``) never land in the checkout. The README's blocks run in
the default suite; the docs' longer examples (graphs at 4096 devices, comparisons over five
sizes) are marked slow.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

import nest
from nest.cli import main

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def blocks(path: Path) -> list[tuple[str, str]]:
    """``(language, text)`` of every fenced code block of ``path``."""
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(path.read_text())]


def commands(text: str) -> list[list[str]]:
    """The ``nest ...`` command lines of a shell block: continuations joined, comments and
    an output redirection dropped (the test captures stdout)."""
    found = []
    for line in text.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if ">" in words:
            words = words[:words.index(">")]
        if words[:1] == ["nest"]:
            found.append(words[1:])
    return found


def _slow(path: Path):
    return () if path.name == "README.md" else (pytest.mark.slow,)


COMMANDS = [pytest.param(argv, id=f"{path.name}:{' '.join(argv)[:60]}", marks=_slow(path))
            for path in DOCS for language, text in blocks(path) if not language for argv in commands(text)]
PYTHON = [pytest.param(text, id=f"{path.name}:{n}") for path in DOCS
          for n, (language, text) in enumerate(blocks(path)) if language == "python"]


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_readme_starts_with_the_two_commands():
    first = blocks(ROOT / "README.md")[0][1].splitlines()
    assert first == ["pip install . && nest plan --model gpt3-175b --cluster dgx-a100 --devices 1024",
                     "pip install '.[test]' && python -m pytest"]
    assert COMMANDS and PYTHON  # the parsing found what it is meant to


@pytest.mark.parametrize("argv", COMMANDS)
def test_documented_command_runs(argv, scratch):
    argv = [str(ROOT / a) if a.startswith("../shared/") else a for a in argv]  # data beside the checkout
    missing = [a for a in argv if a.startswith(str(ROOT / "../shared/")) and not Path(a).exists()]
    if missing:
        pytest.skip(f"shared data not on this machine: {missing[0]}")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    assert code == 0, err.getvalue()
    assert out.getvalue().strip(), "no output"


@pytest.mark.parametrize("text", PYTHON)
def test_documented_python_runs(text, scratch):
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(text, "<docs>", "exec"), {"__name__": "__docs__"})


def test_spec_file_examples_load(scratch):
    """The YAML examples of docs/inputs.md, saved under the name their first comment
    gives, load as that kind of spec."""
    loaders = {"model.yaml": nest.load_model, "cluster.yaml": nest.load_cluster}
    loaded = set()
    for language, text in blocks(ROOT / "docs" / "inputs.md"):
        if language != "yaml":
            continue
        name = re.match(r"# (\S+?):", text).group(1)
        (scratch / name).write_text(text)
        spec = loaders[name](str(scratch / name))
        assert spec.name == yaml.safe_load(text)["name"]
        loaded.add(name)
    assert loaded == set(loaders)


def test_json_examples_parse():
    for path in DOCS:
        for language, text in blocks(path):
            if language == "json":
                json.loads(text)


def test_relative_links_point_at_files():
    for path in DOCS:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", path.read_text()):
            assert (path.parent / target).exists(), f"{path.name}: {target}"
