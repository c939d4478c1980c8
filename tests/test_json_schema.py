"""The ``--json`` documents against their JSON Schema, python/nest/report/plan.schema.json
(documented in docs/json.md): real outputs of a representative set of command lines,
run in this process (``nest.cli.main``), validate; every key they hold is one the schema
lists, and every key the schema lists occurs in one of them; documents with a wrong type,
value or key do not validate."""

import contextlib
import copy
import dataclasses
import functools
import importlib.resources
import io
import json
import re
from pathlib import Path

import pytest

from nest.cli import main
from nest.dp.engine import ENGINES
from nest.parallel import RECOMPUTE_MODES, ZERO_STAGES
from nest.specs import DTYPE_BYTES, FRAMEWORKS, MOE_DISPATCHERS, OVERLAP_SWITCHES, ModelSpec
from nest.studies.baselines import ALL_STRATEGIES
from nest.studies.compare import CompareRow

# the test extra's jsonschema >= 4.18, the first with referencing (its registry of schemas)
jsonschema = pytest.importorskip("jsonschema")
referencing = pytest.importorskip("referencing")
Draft202012Validator, ValidationError = jsonschema.Draft202012Validator, jsonschema.ValidationError

ROOT = Path(__file__).resolve().parent.parent
PROFILE = Path(__file__).parent / "data" / "profiles" / "tiny.json"
# the installed package's copy (package data of nest.report), as a user's code reads it
SCHEMA = json.loads(importlib.resources.files("nest.report").joinpath("plan.schema.json").read_text())
REGISTRY = referencing.Registry().with_resource(SCHEMA["$id"], referencing.Resource.from_contents(SCHEMA))


def validator(definition: str | None = None) -> Draft202012Validator:
    """The validator of a plan document, or of ``$defs/<definition>``."""
    schema = SCHEMA if definition is None else {"$ref": f"{SCHEMA['$id']}#/$defs/{definition}"}
    return Draft202012Validator(schema, registry=REGISTRY)


GPT = ["--model", "gpt-1.7b", "--cluster", "dgx-h100", "--devices", "64"]
PLANS = {  # command lines whose stdout is a plan document
    "plan-tiers": ["plan", *GPT],
    "plan-graph": ["plan", "--model", "llama3-8b", "--cluster", "dgx-h100-rail", "--devices", "64"],
    "plan-moe": ["plan", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--devices", "64"],
    "plan-idle-devices": ["plan", "--model", "llama3-70b", "--cluster", "dgx-h100", "--devices", "280"],
    "plan-measured-layers": ["plan", "--profile", str(PROFILE), "--cluster", "dgx-a100", "--devices", "16",
                             "--global-batch", "64"],
    "evaluate-split": ["evaluate", *GPT, "--tp", "2", "--pp", "2", "--dp", "16", "--mbs", "1",
                       "--layers-per-stage", "14,12"],
    "evaluate-idle-devices": ["evaluate", *GPT, "--tp", "2", "--pp", "2", "--dp", "8", "--mbs", "1"],
    "evaluate-vp2": ["evaluate", *GPT, "--tp", "2", "--pp", "4", "--dp", "8", "--mbs", "1", "--vp", "2"],
    "evaluate-simulate": ["evaluate", *GPT, "--tp", "2", "--pp", "4", "--dp", "8", "--mbs", "1", "--simulate"],
    "evaluate-offload": ["evaluate", "--model", "gpt-1.7b", "--cluster", "dgx-h100", "--devices", "8",
                         "--tp", "1", "--pp", "1", "--dp", "8", "--mbs", "1", "--distributed-optimizer",
                         "--optimizer-offload", "0.5", "--activation-offload", "4"],
    # every optional job key, MoE with ep and vp
    "evaluate-job-options": ["evaluate", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--devices", "64",
                             "--tp", "2", "--pp", "4", "--dp", "8", "--ep", "8", "--mbs", "1", "--vp", "2", "--sp",
                             "--distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather",
                             "--tp-comm-overlap", "--overlap-moe-expert-parallel-comm", "--grad-dtype", "bf16",
                             "--optimizer-state-dtype", "bf16", "--reserved-gib", "3", "--host-threads", "4",
                             "--moe-dispatcher", "flex", "--dtype", "fp8", "--fp8-param-gather",
                             "--fp8-recipe", "tensorwise", "--activation-offload-handler", "v2", "--moe-load-cv", "0.3"],
    # expert tensor parallelism (parallelism.expert_tp and placement.ranks[].expert_tp > 0)
    "evaluate-expert-tp": ["evaluate", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--devices", "64",
                           "--tp", "4", "--pp", "1", "--dp", "16", "--ep", "4", "--etp", "4", "--mbs", "1", "--sp",
                           "--distributed-optimizer"],
    # no host preset (cluster.host null), no published run, the python engine
    "evaluate-tpu-python-engine": ["evaluate", "--model", "gpt-1.7b", "--cluster", "tpuv4-fattree", "--devices",
                                   "64", "--tp", "2", "--pp", "2", "--dp", "16", "--mbs", "1", "--engine", "python"],
}
ERRORS = {  # command lines that fail with exit 2 or 3 and print an error document
    "bad-input": (["plan", "--model", "gpt5", "--cluster", "dgx-a100"], 2),
    "bad-evaluate": (["evaluate", *GPT, "--tp", "1", "--pp", "1", "--dp", "3", "--mbs", "1"], 2),
    "infeasible": (["plan", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--devices", "8"], 3),
    "usage-error": (["plan", "--model", "gpt-1.7b", "--devices", "-4"], 2),  # refused by argparse itself
}
# feasible rows and infeasible ones (manual and MCMC at 2 devices), every strategy's info
COMPARE = ["compare", "--model", "gpt-18b", "--cluster", "dgx-a100", "--devices", "2,8", "--budget", "5"]


@functools.cache
def run(*argv: str) -> tuple[int, str, str]:
    """``nest <argv> --json`` in this process: exit code, stdout, stderr (cached: each
    command line runs once per test session)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*argv, "--json"])
    return code, out.getvalue(), err.getvalue()


def document(name: str) -> dict:
    """The JSON document of case ``name`` (PLANS, ERRORS or "compare")."""
    if name == "compare":
        argv, expected = COMPARE, 0
    elif name in ERRORS:
        argv, expected = ERRORS[name]
    else:
        argv, expected = PLANS[name], 0
    code, out, err = run(*argv)
    assert code == expected, err
    return json.loads(out)


def definition_of(name: str) -> str | None:
    return "compare_document" if name == "compare" else "error_document" if name in ERRORS else None


ALL_CASES = [*PLANS, *ERRORS, "compare"]


# -- the schema itself ------------------------------------------------------------------


def test_schema_is_a_valid_draft_2020_12_schema():
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(SCHEMA)
    refs = set(re.findall(r'"\$ref": "#/\$defs/([a-z_]+)"', json.dumps(SCHEMA)))
    assert refs | {"error_document", "compare_document"} == set(SCHEMA["$defs"])  # no unused definition


def test_the_enums_are_the_codes_sets():
    d = SCHEMA["$defs"]
    assert d["parallelism"]["properties"]["zero"]["enum"] == list(ZERO_STAGES)
    assert d["parallelism"]["properties"]["recompute"]["enum"] == list(RECOMPUTE_MODES)
    assert d["engine"]["enum"] == list(ENGINES)
    job = d["job"]["properties"]
    assert job["framework"]["enum"] == list(FRAMEWORKS)
    assert job["dtype"]["enum"] == list(DTYPE_BYTES)
    assert job["moe_dispatcher"]["enum"] == [m for m in MOE_DISPATCHERS if m != "alltoall"]  # only when not default
    assert set(OVERLAP_SWITCHES) <= set(job) and all(job[s] == {"const": True} for s in OVERLAP_SWITCHES)
    assert list(d["model_spec"]["properties"]) == [f.name for f in dataclasses.fields(ModelSpec)]
    assert list(d["compare_row"]["properties"]) == [f.name for f in dataclasses.fields(CompareRow)]
    assert d["compare_row"]["properties"]["strategy"]["enum"] == list(ALL_STRATEGIES)


def test_the_schema_ships_with_the_package():
    resource = importlib.resources.files("nest.report").joinpath("plan.schema.json")
    assert resource.is_file()
    assert json.loads((ROOT / "python" / "nest" / "report" / "plan.schema.json").read_text()) == SCHEMA


# -- real documents validate --------------------------------------------------------------


@pytest.mark.parametrize("name", ALL_CASES)
def test_real_documents_validate(name):
    doc = document(name)
    validator(definition_of(name)).validate(doc)
    if definition_of(name) is None:  # a plan document is no error or compare document, and back
        assert not validator("error_document").is_valid(doc) and not validator("compare_document").is_valid(doc)
    else:
        assert not validator().is_valid(doc)


def test_what_the_cases_cover():
    """The representative set holds what it is meant to (else a case silently drifts)."""
    graph, moe, idle = document("plan-graph"), document("plan-moe"), document("plan-idle-devices")
    assert graph["placement"]["device_order"] == "graph" and isinstance(graph["stages"][0]["devices"][0], str)
    assert moe["model"]["active_parameters"] < moe["model"]["parameters"] and moe["parallelism"]["ep"] > 1
    assert idle["devices_used"] < idle["cluster"]["devices"]
    assert isinstance(idle.get("devices_idle_reason"), str) and idle["devices_idle_reason"]
    for name in ("plan-tiers", "plan-graph", "plan-moe"):
        doc = document(name)
        assert doc["devices_used"] == doc["cluster"]["devices"] and doc.get("devices_idle_reason") is None
    assert document("evaluate-idle-devices")["devices_idle_reason"] == "the configuration's tp x cp x pp x dp = " \
                                                                       "2 x 1 x 2 x 8 = 32"
    assert document("plan-measured-layers")["model"]["spec"] is None
    assert document("plan-measured-layers")["published_reference"] is None
    assert [len(s["layers"]) for s in document("evaluate-split")["stages"]] == [14, 12]
    vp2 = document("evaluate-vp2")
    assert vp2["parallelism"]["vp"] == 2 and len(vp2["stages"]) == 8
    assert all(len(r["live_micro_batches"]) == 2 for r in vp2["memory"]["ranks"])
    assert "simulation" in document("evaluate-simulate")
    assert not any("simulation" in document(name) for name in PLANS if name != "evaluate-simulate")
    offload = document("evaluate-offload")["parallelism"]
    assert offload["optimizer_offload_fraction"] == 0.5 and offload["activation_offload_layers"] == 4
    assert document("evaluate-tpu-python-engine")["cluster"]["host"] is None
    rows = document("compare")["rows"]
    assert {r["feasible"] for r in rows} == {True, False}


# -- keys: what the documents hold, what the schema lists ---------------------------------


def _resolve(pointer: str) -> dict:
    node = SCHEMA
    for part in pointer.removeprefix("#/").split("/"):
        node = node[part]
    return node


def _branches(schema: dict, at: str):
    """(pointer, schema) of ``schema`` at pointer ``at`` and of its alternatives, with
    ``$ref`` followed and ``anyOf`` opened."""
    if "$ref" in schema:
        target = schema["$ref"]
        yield from _branches(_resolve(target), target)
    elif "anyOf" in schema:
        for i, alternative in enumerate(schema["anyOf"]):
            yield from _branches(alternative, f"{at}/anyOf/{i}")
    else:
        yield at, schema


def walk(value, schema: dict, at: str = "#", path: str = "$", seen: set | None = None) -> list[str]:
    """The paths (``$.memory.ranks[0].new_bytes``) of the keys in ``value`` that
    ``schema`` does not list, or where it has no object or array; the schema pointers
    of the properties met go into ``seen``."""
    seen = set() if seen is None else seen
    kind = "object" if isinstance(value, dict) else "array" if isinstance(value, list) else None
    if kind is None:
        return []
    matching = [(p, s) for p, s in _branches(schema, at) if s.get("type") == kind]
    if not matching:
        return [f"{path} (an {kind} where the schema has none)"]
    pointer, schema = matching[0]
    if kind == "array":
        return [bad for i, item in enumerate(value)
                for bad in walk(item, schema["items"], f"{pointer}/items", f"{path}[{i}]", seen)]
    properties, bad = schema.get("properties", {}), []
    for key, item in value.items():
        if key not in properties:
            bad.append(f"{path}.{key}")
            continue
        seen.add(f"{pointer}/properties/{key}")
        bad += walk(item, properties[key], f"{pointer}/properties/{key}", f"{path}.{key}", seen)
    return bad


def schema_properties(node=SCHEMA, at: str = "#") -> set[str]:
    """The pointers of every property the schema defines (not those of its if/then
    conditions, which only restate defined ones)."""
    found = set()
    if isinstance(node, dict):
        for key, child in node.items():
            if key in ("allOf", "if", "then", "else", "not"):
                continue
            if key == "properties":
                for name, sub in child.items():
                    found.add(f"{at}/properties/{name}")
                    found |= schema_properties(sub, f"{at}/properties/{name}")
            else:
                found |= schema_properties(child, f"{at}/{key}")
    elif isinstance(node, list):
        for i, child in enumerate(node):
            found |= schema_properties(child, f"{at}/{i}")
    return found


def _root(name: str) -> tuple[dict, str]:
    definition = definition_of(name)
    return (SCHEMA, "#") if definition is None else (SCHEMA["$defs"][definition], f"#/$defs/{definition}")


@pytest.mark.parametrize("name", ALL_CASES)
def test_every_key_of_a_document_is_in_the_schema(name):
    """Plan.to_dict (and the other documents) growing a key fails here, with its path."""
    assert walk(document(name), *_root(name)) == []


def test_every_key_of_the_schema_occurs_in_a_document():
    """No key the schema lists is stale: each one occurs in some case's document."""
    seen: set[str] = set()
    for name in ALL_CASES:
        walk(document(name), *_root(name), seen=seen)
    assert sorted(schema_properties() - seen) == []


def test_the_walk_finds_a_new_key():
    doc = copy.deepcopy(document("evaluate-simulate"))
    doc["memory"]["ranks"][1]["pinned_bytes"] = 0.0
    doc["simulation"]["events"] = []
    doc["new_top_level"] = 1
    assert walk(doc, SCHEMA) == ["$.memory.ranks[1].pinned_bytes", "$.simulation.events", "$.new_top_level"]
    assert not validator().is_valid(doc)


def test_the_documentation_names_every_key():
    text = (ROOT / "docs" / "json.md").read_text()
    assert "plan.schema.json" in text
    names = {pointer.rsplit("/", 1)[1] for pointer in schema_properties()}
    assert sorted(n for n in names if f"`{n}`" not in text) == []


# -- documents that must not validate ------------------------------------------------------


def _set(doc: dict, path: list, value) -> dict:
    doc = copy.deepcopy(doc)
    node = doc
    for part in path[:-1]:
        node = node[part]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return doc


@pytest.mark.parametrize("path,value", [
    (["parallelism", "tp"], "2"),  # a string for an integer
    (["parallelism", "tp"], 2.5),  # a fraction for an integer
    (["parallelism", "sp"], 0),  # an integer for a boolean
    (["parallelism", "zero"], 4),  # no ZeRO stage 4
    (["parallelism", "recompute"], "partial"),
    (["parallelism", "rank_order"], "tp-tp-ep-dp-pp"),
    (["parallelism", "optimizer_offload_fraction"], 1.5),
    (["step_time_s"], "0.3"),
    (["step_time_s"], None),  # not nullable
    (["stages", 0, "devices", 0], [0]),
    (["stages"], KeyError),  # required
    (["breakdown_s", "bubble"], KeyError),
    (["breakdown_s", "activation_offload"], -1e-15),  # rounding residue is zeroed
    (["memory", "ranks", 0, "total_bytes"], "40 GB"),
    (["engine"], "rust"),
    (["job", "overlap_grad_reduce"], False),  # present only when on
    (["devices_idle_reason"], 3),
    (["model", "spec", "mlp"], "relu"),
    (["placement", "ranks", 0, "device"], "d0"),  # a graph's node id in an index placement
    (["cluster", "tiers", 0, "bandwidth_GBps"], 0),
])
def test_a_wrong_document_is_rejected(path, value):
    doc = document("plan-tiers")
    validator().validate(doc)
    with pytest.raises(ValidationError) as error:
        validator().validate(_set(doc, path, value))
    failed = list(error.value.absolute_path)  # where the validator reports it: at or above the change
    assert failed == path[:len(failed)] and (failed or value is KeyError)


@pytest.mark.parametrize("doc", [
    {"error": {"kind": "bad_input", "exit_code": 3, "message": "x"}},  # bad input exits 2
    {"error": {"kind": "infeasible", "exit_code": 2, "message": "x"}},
    {"error": {"kind": "unexpected", "exit_code": 1, "message": "x"}},
    {"error": {"kind": "infeasible", "exit_code": 3}},
    {"error": {"kind": "infeasible", "exit_code": 3, "message": "x", "trace": ""}},
    {"error": "no plan"},
])
def test_a_wrong_error_document_is_rejected(doc):
    assert not validator("error_document").is_valid(doc)


def test_a_wrong_compare_document_is_rejected():
    doc = document("compare")
    feasible = next(i for i, r in enumerate(doc["rows"]) if r["feasible"])
    infeasible = next(i for i, r in enumerate(doc["rows"]) if not r["feasible"])
    for path, value in ((["rows", feasible, "throughput_tokens_per_s"], None),  # feasible rows have numbers
                        (["rows", feasible, "reason"], "too big"),
                        (["rows", infeasible, "step_time_s"], 1.0),  # infeasible ones none
                        (["rows", feasible, "strategy"], "random"),
                        (["rows", feasible, "info", "temperature"], 1.0),
                        (["normalized_to", 0, "devices"], "8")):
        assert not validator("compare_document").is_valid(_set(doc, path, value)), path


def test_memory_per_device_holds_the_binding_ranks_parts():
    """DESIGN's memory breakdown inside memory_per_device_bytes: the parts of the rank that
    binds, which add up to max."""
    for name in PLANS:
        doc = document(name)
        per_device, ranks = doc["memory_per_device_bytes"], doc["memory"]["ranks"]
        peak = next(r for r in ranks if r["rank"] == doc["memory"]["peak_rank"])
        parts = ("weights", "gradients", "optimizer", "activations", "transient", "reserve")
        assert {part: per_device[part] for part in parts} == {part: peak[f"{part}_bytes"] for part in parts}
        assert sum(per_device[part] for part in parts) == pytest.approx(per_device["max"], rel=1e-12)
