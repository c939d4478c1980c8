"""Start-up imports only what a command needs (issue 19): the packages export lazily
(:mod:`nest._lazy`), rare paths import their modules when taken. Each check runs in a
fresh interpreter, since this test process has imported everything already."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import subprocess
import sys

import pytest

import nest
from nest._lazy import lazy_exports
from nest.frameworks import FRAMEWORKS, framework

PACKAGES = ["nest", "nest.cost", "nest.dp", "nest.frameworks", "nest.inputs", "nest.network", "nest.presets",
            "nest.report", "nest.schedule", "nest.search", "nest.studies"]

# What a plan on a tiered cluster never needs: graph networks, YAML, plotting, the sweep
# machinery, the event-driven simulator, refusal diagnostics, launch formats, HF configs,
# numpy's masked arrays (np.unique and np.isin import them: nest.arrays).
NOT_FOR_A_TIER_PLAN = ["networkx", "scipy", "yaml", "matplotlib", "distributed", "dask", "importlib.metadata",
                       "numpy.ma",
                       "nest.network.graph", "nest.network.routing", "nest.network.generators", "nest.studies",
                       "nest.schedule.simulate", "nest.search.diagnose", "nest.inputs.hf", "nest.report.export",
                       "nest.frameworks.megatron", "nest.frameworks.deepspeed", "nest.frameworks.torchtitan"]


def loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code`` (stdout silenced)."""
    probe = ("import contextlib, io, json, sys\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n"
             + "".join(f"    {line}\n" for line in code.splitlines())
             + "print(json.dumps(sorted(sys.modules)))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout))


def test_import_nest_loads_no_submodule_and_no_numpy():
    loaded = loaded_after("import nest")
    assert sorted(m for m in loaded if m.startswith("nest")) == ["nest", "nest._lazy"]
    assert "numpy" not in loaded


def test_version_needs_no_planning_code():
    loaded = loaded_after("import nest.cli\ntry:\n    nest.cli.main(['--version'])\nexcept SystemExit:\n    pass")
    assert not {"nest.planner", "nest.search", "nest.cost", "nest.network"} & loaded


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["plan", "--help"], ["models"], ["clusters"]])
def test_commands_that_plan_nothing_need_no_numpy(argv):
    """The command line validates against :mod:`nest.degrees` and :mod:`nest.specs`, which
    need no numpy (60-120 ms of a 0.1-0.25 s start-up); only a command that costs
    something imports it."""
    loaded = loaded_after(f"import nest.cli\ntry:\n    nest.cli.main({argv!r})\nexcept SystemExit:\n    pass")
    assert "nest.cli" in loaded and "numpy" not in loaded


def test_space_limits_from_the_package_need_no_numpy():
    loaded = loaded_after("import nest\nnest.SpaceLimits(tp=(8,)).orders()")
    assert "nest.degrees" in loaded and "numpy" not in loaded


@pytest.fixture(scope="module")
def tier_plan_modules() -> set[str]:
    return loaded_after("import nest.cli\n"
                        "assert nest.cli.main(['plan', '--model', 'gpt-1.7b', '--cluster', 'dgx-a100', "
                        "'--devices', '16']) == 0")


@pytest.mark.parametrize("module", NOT_FOR_A_TIER_PLAN)
def test_a_tier_plan_does_not_import(tier_plan_modules, module):
    assert "nest.search.search" in tier_plan_modules  # the plan really ran
    assert module not in tier_plan_modules


def test_a_megatron_plan_loads_only_its_framework():
    loaded = loaded_after("import nest.cli\n"
                          "assert nest.cli.main(['plan', '--model', 'gpt-1.7b', '--cluster', 'dgx-a100', "
                          "'--devices', '16', '--framework', 'megatron']) == 0")
    frameworks = sorted(m for m in loaded if m.startswith("nest.frameworks."))
    assert frameworks == ["nest.frameworks.base", "nest.frameworks.megatron", "nest.frameworks.plan_reader"]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_is_its_modules_object(package):
    pkg = importlib.import_module(package)
    exports = getattr(pkg, "_EXPORTS", {})
    assert set(exports) <= set(pkg.__all__)
    for name in pkg.__all__:
        value = getattr(pkg, name)
        assert not isinstance(value, type(sys)), f"{package}.{name} is a module"
        if name in exports:
            assert value is getattr(importlib.import_module(exports[name], package), name)
    assert set(pkg.__all__) <= set(dir(pkg))


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="^module 'nest.cost' has no attribute 'nonexistent'$"):
        nest.cost.nonexistent  # noqa: B018
    assert not hasattr(nest, "nonexistent")


def test_a_name_its_submodule_would_shadow_is_refused():
    with pytest.raises(ValueError, match=r"^pkg: \['search'\] would be shadowed by their submodules; "
                                         r"import them eagerly$"):
        lazy_exports({"__name__": "pkg"}, {"search": ".search", "polish": ".search"})


def test_a_lazy_name_is_cached_in_the_package():
    namespace = {"__name__": "nest.cost"}
    getter, _ = lazy_exports(namespace, {"Scenario": ".scenario"})
    found = getter("Scenario")
    assert namespace["Scenario"] is found is importlib.import_module("nest.cost.scenario").Scenario


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_framework_by_name_is_one_shared_instance(name):
    assert framework(name).name == name
    assert framework(name) is framework(name)


def test_an_unknown_framework_is_a_key_error():
    with pytest.raises(KeyError):
        framework("jax")


def test_the_version_has_one_source():
    assert nest.__version__ == importlib.metadata.version("nest-planner")
    done = subprocess.run([sys.executable, "-m", "nest", "--version"], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == f"nest {nest.__version__}"


def test_the_lazy_names_are_the_public_face():
    """The TYPE_CHECKING block (what editors and type checkers see) names exactly the lazy names."""
    with open(nest.__file__) as f:
        typed = {line.split(" as ")[-1].strip() for line in f if line.startswith("    from .")}
    assert typed == set(nest.__all__) == set(nest._EXPORTS)
