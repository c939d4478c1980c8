"""nest.jsontext.dumps_indented writes json.dumps(obj, indent=2)'s text, character for
character: plan documents, odd scalars and keys, and what json rejects, rejected alike."""

import json

import numpy as np
import pytest

from nest.jsontext import dumps_indented


def test_the_text_of_json_dumps():
    doc = {"a": [1, 2.5, float("nan"), float("inf"), -float("inf"), True, False, None, "é\n\"x\u2028", [], {},
                 (1, 2), [[]], {"b": {}}, [[1, {"c": [2.0, -0.0]}]]],
           1: "int key", 2.5: "float key", True: "t", False: "f", None: "n", "big": 10 ** 30, "tiny": 5e-324,
           "numpy": np.float64(0.1), "ranks": [{"rank": r, "device": f"({r}, 0)", "w": r / 3} for r in range(50)]}
    for indent in (2, 4):
        assert dumps_indented(doc, indent) == json.dumps(doc, indent=indent)
    for flat in ([], {}, [1], {"a": None}, "text", 3, 1.5, None):
        assert dumps_indented(flat) == json.dumps(flat, indent=2)


@pytest.mark.parametrize("bad", [{"a": {1, 2}}, {(1, 2): 3}, [object()], {"a": [np.int64(3)]}])
def test_what_json_rejects(bad):
    with pytest.raises(TypeError):
        dumps_indented(bad)


def test_a_plan_document(tmp_path):
    """A graph plan's --json document (ranks, stages, placement) as json writes it."""
    from nest.cli import _scenario, build_parser
    from nest.planner import plan

    args = build_parser().parse_args(["plan", "--model", "llama3-8b", "--cluster", "tpuv4-torus", "--devices", "64"])
    doc = plan(**{k: v for k, v in _scenario(args).items() if k in ("model", "cluster", "job")}).to_dict()
    assert dumps_indented(doc) == json.dumps(doc, indent=2)
