"""The package's architecture rules (scripts/check_imports.py): no import cycles, no
upward imports between floors, no private names across modules, no file above 700
lines; and the checker itself catches each kind of violation."""

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "check_imports.py"


def _check(repo: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT)], cwd=repo, capture_output=True, text=True, timeout=120)


def test_the_package_keeps_its_architecture():
    done = _check(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("0 violations")


@pytest.fixture
def copy(tmp_path):
    """A copy of the package's sources to plant violations in."""
    shutil.copytree(ROOT / "python" / "nest", tmp_path / "python" / "nest",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    return tmp_path


@pytest.mark.parametrize("module,line,message", [
    ("specs.py", "from .planner import plan", "nest.specs (floor 1) imports nest.planner (floor 12): an upward import"),
    ("cost/nodes.py", "from .scenario import Scenario", "import cycle: nest.cost.nodes <-> nest.cost.scenario"),
    ("report/text.py", "from ..search.search import _Search", "imports the private name nest.search.search._Search"),
    ("cli.py", "from . import _core", "imports the compiled core; only nest.dp.engine and nest.network.kernels may"),
    ("network/paths.py", "from .. import _core",
     "imports the compiled core; only nest.dp.engine and nest.network.kernels may"),
])
def test_the_checker_catches_each_kind_of_violation(copy, module, line, message):
    path = copy / "python" / "nest" / module
    path.write_text(path.read_text() + f"\n{line}\n")
    done = _check(copy)
    assert done.returncode == 1
    assert message in done.stdout


def test_the_checker_counts_lines(copy):
    path = copy / "python" / "nest" / "units.py"
    path.write_text(path.read_text() + "\n" * 700)
    done = _check(copy)
    assert done.returncode == 1 and "units.py: 7" in done.stdout and "lines (at most 700)" in done.stdout


def test_every_subpackage_documents_its_public_names():
    for init in sorted((ROOT / "python" / "nest").glob("*/__init__.py")):
        name = f"nest.{init.parent.name}"
        module = importlib.import_module(name)
        assert module.__doc__ and len(module.__doc__) > 80, name
        assert module.__all__ and all(hasattr(module, n) for n in module.__all__), name


def test_deprecated_module_names_still_work():
    """The README of 0.1 documented nest.topology and nest.hf: kept as aliases."""
    from nest import hf, topology
    from nest.inputs import hf as inputs_hf
    from nest.network import generators, graph

    assert topology.fat_tree is generators.fat_tree and topology.graph_cluster is graph.graph_cluster
    assert hf.model_from_hf_config is inputs_hf.model_from_hf_config
    assert importlib.util.find_spec("nest.tables") is None  # gone: its parts live in nest.cost and nest.network
