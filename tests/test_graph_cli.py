"""The command line on graph clusters: graph files and presets, the placement in the
JSON document, the hostfile, one-line errors with exit code 2."""

import json
from pathlib import Path

import pytest

from nest.cli import main

DATA = Path(__file__).parent / "data" / "graphs"


def _edge_list(tmp_path, extra=""):
    """Two 4-GPU nodes on NVSwitches, one leaf switch for their NICs."""
    nodes = ["  - {id: leaf, kind: switch}", "  - {id: nvs0, kind: switch}", "  - {id: nvs1, kind: switch}"]
    links = []
    for i in range(8):
        nodes.append(f"  - {{id: gpu{i}, kind: device, index: {i}, host: server{i // 4}}}")
        links.append(f"  - {{a: gpu{i}, b: nvs{i // 4}, bandwidth_GBps: 300, latency_us: 1.5, cost: 1}}")
        links.append(f"  - {{a: gpu{i}, b: leaf, bandwidth_GBps: 25, latency_us: 2.5, cost: 2}}")
    path = tmp_path / "net.yaml"
    path.write_text(f"name: lab\ndevice: a100-80gb\n{extra}nodes:\n" + "\n".join(nodes) + "\nlinks:\n"
                    + "\n".join(links) + "\n")
    return path


def test_plan_on_a_graph_file_json(tmp_path, capsys):
    path = _edge_list(tmp_path)
    assert main(["plan", "--model", "gpt-1.7b", "--cluster", str(path), "--global-batch", "64",
                 "--seq-len", "2048", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["cluster"]["name"] == "lab" and doc["cluster"]["device"] == "a100-80gb"
    ranks = doc["placement"]["ranks"]
    assert len(ranks) == doc["devices_used"]
    assert {r["device"] for r in ranks} <= {f"gpu{i}" for i in range(8)}
    assert all(set(r) >= {"rank", "tp", "cp", "dp", "pp", "ep", "device", "host", "slot"} for r in ranks)
    for stage in doc["stages"]:
        assert stage["devices"] == [ranks[i]["device"] for i in stage["ranks"]]


def test_emit_hostfile(tmp_path, capsys):
    path = _edge_list(tmp_path)
    assert main(["evaluate", "--model", "gpt-1.7b", "--cluster", str(path), "--global-batch", "64",
                 "--seq-len", "2048", "--tp", "2", "--pp", "2", "--dp", "2", "--mbs", "1", "--sp",
                 "--emit", "hostfile"]) == 0
    out = capsys.readouterr().out.splitlines()
    lines = [line for line in out if not line.startswith("#")]
    assert lines == [f"rank {r}=server{r // 4} slot={r % 4}" for r in range(8)]
    assert any("torchrun --nnodes 2 --nproc-per-node 4" in line for line in out)


def test_cluster_file_with_graph_key(tmp_path, capsys):
    _edge_list(tmp_path)
    spec = tmp_path / "cluster.yaml"
    spec.write_text("name: lab2\ndevice: {base: a100-80gb, memory_GiB: 40}\ngraph: net.yaml\n")
    assert main(["plan", "--model", "gpt-1.7b", "--cluster", str(spec), "--global-batch", "64",
                 "--seq-len", "2048", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["cluster"]["name"] == "lab2" and doc["memory_per_device_bytes"]["capacity"] == 40 * 2**30


def test_graph_presets(capsys):
    assert main(["clusters", "--json"]) == 0
    names = {c["name"] for c in json.loads(capsys.readouterr().out)["graph_clusters"]}
    assert names == {"h100-fattree", "dgx-h100-rail", "tpuv4-torus", "h100-leafspine", "h100-dragonfly",
                     "dgx-a100-graph", "dgx-h100-graph", "gb200-nvl72-graph", "tpuv4-fattree-graph",
                     "h100-spineleaf-graph"}
    assert main(["plan", "--model", "gpt-1.7b", "--cluster", "dgx-h100-rail", "--devices", "32",
                 "--global-batch", "128", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["placement"]["device_order"] == "graph" and doc["cluster"]["devices"] == 32


def test_graphml_and_node_link_files(capsys):
    for name in ("small.graphml", "small.json"):
        assert main(["plan", "--model", "gpt-1.7b", "--cluster", str(DATA / name), "--global-batch", "16",
                     "--seq-len", "1024", "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["cluster"]["devices"] == 4 and doc["cluster"]["device"] == "h100-sxm"


@pytest.mark.parametrize("content,message", [
    ("nodes:\n  - {id: a, kind: device}\n  - {id: b, kind: device}\nlinks:\n  - {a: a, b: b, bandwidth_GBps: 0}\n",
     "bandwidth_GBps = 0"),
    ("nodes:\n  - {id: a, kind: device}\n  - {id: b, kind: device}\nlinks: []\n", "not connected"),
    ("nodes:\n  - {id: a, kind: device}\nlinks: []\ncolour: red\n", "'colour': unknown"),
    ("nodes: [\n", "cannot parse"),
])
def test_bad_graph_files(tmp_path, capsys, content, message):
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    code = main(["plan", "--model", "gpt-1.7b", "--cluster", str(path), "--global-batch", "16"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1


def test_graph_size_mismatch(tmp_path, capsys):
    code = main(["plan", "--model", "gpt-1.7b", "--cluster", str(_edge_list(tmp_path)), "--devices", "16",
                 "--global-batch", "16"])
    err = capsys.readouterr().err
    assert code == 2 and "devices = 16" in err
    assert main(["plan", "--model", "gpt-1.7b", "--cluster", "h100-fattree", "--devices", "17"]) == 2


@pytest.mark.parametrize("cluster,devices", [("tpuv4-torus", 10**9), ("dgx-h100-rail", 10**9),
                                             ("h100-dragonfly", 2**20), ("dgx-a100-graph", 2**22)])
def test_graph_preset_beyond_the_link_cap(capsys, cluster, devices):
    """More devices than a graph preset's graph may hold (MAX_GRAPH_LINKS): one line naming
    the field and value, exit code 2, before anything is built."""
    code = main(["plan", "--model", "llama3-70b", "--cluster", cluster, "--devices", str(devices)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"devices = {devices}: {cluster} would have" in err and "links" in err


def test_link_cap_sizes():
    """Every graph preset builds far beyond 16384 devices; its stated maximum is within
    the cap, one more device is not."""
    from nest.errors import SpecError
    from nest.presets.clusters import GRAPH_CLUSTERS, MAX_GRAPH_LINKS

    for template in GRAPH_CLUSTERS.values():
        top = template.max_devices()
        assert top > 40000 and template.links(top) <= MAX_GRAPH_LINKS < template.links(top + 1)
        with pytest.raises(SpecError, match=f"devices = {top + 1}: "):
            template.sized(top + 1)


def test_plans_on_trees_and_tori_import_no_scipy():
    """The link matrices are built without scipy.sparse (nest.network.compiled.sparse_matrix)
    and these presets need no clustering (fat trees, leaf-spine and rails know their
    order; tori of 2048 chips and more cluster on byte codes): a plan imports no scipy."""
    import subprocess
    import sys

    for cluster, devices in (("h100-fattree", 256), ("h100-leafspine", 256), ("dgx-h100-rail", 256),
                             ("tpuv4-torus", 2048)):
        probe = ("import contextlib, io, sys\nfrom nest.cli import main\n"
                 "with contextlib.redirect_stdout(io.StringIO()):\n"
                 f"    main(['plan', '--model', 'llama3-8b', '--cluster', {cluster!r}, '--devices', '{devices}'])\n"
                 "print(sorted(m for m in sys.modules if m.split('.')[0] == 'scipy'))\n")
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().splitlines()[-1] == "[]", (cluster, done.stdout[-300:])
