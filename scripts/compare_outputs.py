#!/usr/bin/env python3
"""Prove that a change left nest's behaviour alone: old ref against the current checkout.

What it checks
--------------
Every scenario of ``CORPUS`` below (plans and evaluations on every model preset, tier and
graph cluster presets, measured profiles, NEST artifact instances, the overlap switches,
both rankings, the dtypes, ``--network nccl``, unfused attention, fixed configurations
with VP/CP/EP/ZeRO/recomputation/explicit splits, Hugging Face configs, cluster and
model files, ``--emit`` outputs, the listings, and failures with exit codes 2 and 3) is
run through the real command line, ``python -m nest ...``, once under the interpreter of
the OLD ref and once under the NEW one, each in a fresh temporary working directory and
with every data path absolute (the same path on both sides). For each scenario it
compares:

* the exit code;
* for a non-zero exit, the stderr text, exactly;
* stdout: for ``--json`` scenarios the parsed document, with the timing fields removed
  (``solve_time_s`` at any depth, and ``runtime.threads``, which follows the machine and
  ``OMP_NUM_THREADS``; everything else, ``runtime.engine`` and ``runtime.openmp``
  included, is kept), as canonical text: ``json.dumps(doc, sort_keys=True)``. Floats are
  not reformatted: ``json`` reads and writes them with ``repr``, so the texts agree only
  when every float is bit-identical. JSON numbers compare by value: an integer and a
  float of the same value (``0`` and ``0.0``) are the same number, so integers below
  2^53 are read as floats before the comparison. Text scenarios (``--emit``) compare
  stdout exactly.

It prints one line per scenario, ``same`` or ``DIFFERENT: <first differing JSON path>``
(or the exit code / stderr / stdout line that differs), then a summary, and exits 1 if
any scenario differs (2 if it could not set up a side).

The OLD side
------------
OLD_REF (any git ref of this repository) is checked out in a temporary ``git worktree``
and installed non-editable (``pip install '<worktree>[graphs]'``, about 40 s) into its
own virtual environment, cached outside the repository in
``$XDG_CACHE_HOME/nest-compare/<commit>/venv`` (``~/.cache/nest-compare/<commit>/venv``
when XDG_CACHE_HOME is unset); a second run with the same commit reuses it and needs no
worktree. The worktree is removed (``git worktree remove``) unless ``--keep``.

The NEW side is the ``nest`` that the interpreter running this script imports (an
editable install of the checkout, typically), or that of ``--new-python PATH``.

Input files are taken from the current checkout (``tests/data``, and the NEST artifact
instances in ``../shared/data/nest-artifact`` beside the repository); a ``tests/data``
file the checkout no longer has is taken from OLD_REF (``git show``). The model and
cluster spec files of the corpus are written by this script. Both sides get the same
absolute paths.

Usage
-----
    python scripts/compare_outputs.py OLD_REF [--new-python PATH] [--jobs N] [--keep]
                                      [--record DIR] [--side both|old|new] [--only IDS]
                                      [--list]

    python scripts/compare_outputs.py main~1                  # last commit vs the checkout
    python scripts/compare_outputs.py 4fe53e1 --record /tmp/cmp   # also write the outputs
    diff -r /tmp/cmp/old /tmp/cmp/new                          # what differs, in full
    python scripts/compare_outputs.py 4fe53e1 \\
        --new-python ~/.cache/nest-compare/<commit>/venv/bin/python   # self-check: all same
    python scripts/compare_outputs.py --side new --record /tmp/cmp  # one side, no build

``--jobs N`` runs N scenarios at once as separate processes (default 2), each with
``OMP_NUM_THREADS = cores / N`` unless OMP_NUM_THREADS is set (outputs do not depend on
the thread count). ``--record DIR`` writes ``DIR/<side>/<id>.json``, the exact
normalised record that is compared. ``--only`` takes comma-separated scenario ids (or id
prefixes). Standard library only.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# -- the corpus ---------------------------------------------------------------------------
#
# Each scenario: (id, arguments of `nest`, options). Paths: "{data}" is the repository's
# tests/data, "{artifact}" the NEST artifact directory, "{inputs}" the files this script
# writes (INPUT_FILES). Options: "expect": the exit code the scenario is meant to have
# (a mismatch is reported as a warning: the scenario no longer tests what it was chosen
# for); "text": compare stdout as text (not JSON).

ART = "{artifact}"

CORPUS: list[tuple[str, list[str], dict]] = [
    # every model preset, on the four tier cluster presets
    ("m-gpt3-175b", ["plan", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--devices", "1024", "--json"], {}),
    ("m-gpt-1.7b", ["plan", "--model", "gpt-1.7b", "--cluster", "dgx-a100", "--devices", "64", "--json"], {}),
    ("m-gpt-3.6b", ["plan", "--model", "gpt-3.6b", "--cluster", "dgx-h100", "--devices", "128", "--json"], {}),
    ("m-gpt-7.5b", ["plan", "--model", "gpt-7.5b", "--cluster", "tpuv4-fattree", "--devices", "128", "--json"], {}),
    ("m-gpt-18b", ["plan", "--model", "gpt-18b", "--cluster", "h100-spineleaf", "--devices", "256", "--json"], {}),
    ("m-gpt-39b", ["plan", "--model", "gpt-39b", "--cluster", "dgx-a100", "--devices", "512", "--json"], {}),
    ("m-gpt-76b", ["plan", "--model", "gpt-76b", "--cluster", "dgx-h100", "--devices", "1024", "--json"], {}),
    ("m-gpt-145b", ["plan", "--model", "gpt-145b", "--cluster", "dgx-a100", "--devices", "1536", "--json"], {}),
    ("m-gpt-310b", ["plan", "--model", "gpt-310b", "--cluster", "dgx-h100", "--devices", "2048", "--json"], {}),
    ("m-gpt-530b", ["plan", "--model", "gpt-530b", "--cluster", "dgx-a100", "--devices", "2048", "--json"], {}),
    ("m-gpt-1t", ["plan", "--model", "gpt-1t", "--cluster", "dgx-a100", "--devices", "3072", "--json"], {}),
    ("m-llama2-7b", ["plan", "--model", "llama2-7b", "--cluster", "dgx-h100", "--devices", "64", "--json"], {}),
    ("m-llama2-13b", ["plan", "--model", "llama2-13b", "--cluster", "dgx-a100", "--devices", "128", "--json"], {}),
    ("m-llama2-70b", ["plan", "--model", "llama2-70b", "--cluster", "dgx-h100", "--devices", "512", "--json"], {}),
    ("m-llama3-8b", ["plan", "--model", "llama3-8b", "--cluster", "h100-spineleaf", "--devices", "128", "--json"], {}),
    ("m-llama3-70b", ["plan", "--model", "llama3-70b", "--cluster", "dgx-h100", "--devices", "512", "--json"], {}),
    ("m-llama3.1-405b", ["plan", "--model", "llama3.1-405b", "--cluster", "dgx-h100", "--devices", "2048",
                         "--json"], {}),
    ("m-bert-large", ["plan", "--model", "bert-large", "--cluster", "tpuv4-fattree", "--devices", "64", "--json"], {}),
    ("m-mixtral-8x7b", ["plan", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--devices", "256", "--json"], {}),
    ("m-mixtral-8x22b", ["plan", "--model", "mixtral-8x22b", "--cluster", "dgx-h100", "--devices", "512",
                         "--json"], {}),
    ("m-qwen3-30b-a3b", ["plan", "--model", "qwen3-30b-a3b", "--cluster", "dgx-a100", "--devices", "128",
                         "--json"], {}),
    ("m-qwen3-235b-a22b", ["plan", "--model", "qwen3-235b-a22b", "--cluster", "dgx-h100", "--devices", "1024",
                           "--json"], {}),
    ("m-deepseek-v3", ["plan", "--model", "deepseek-v3", "--cluster", "dgx-h100", "--devices", "2048", "--json"], {}),
    # graph cluster presets, small
    ("g-h100-fattree", ["plan", "--model", "llama2-7b", "--cluster", "h100-fattree", "--devices", "128", "--json"], {}),
    ("g-dgx-h100-rail", ["plan", "--model", "gpt-1.7b", "--cluster", "dgx-h100-rail", "--devices", "64", "--json"], {}),
    ("g-dgx-h100-rail-moe", ["plan", "--model", "mixtral-8x7b", "--cluster", "dgx-h100-rail", "--devices", "128",
                             "--json"], {}),
    ("g-tpuv4-torus", ["plan", "--model", "gpt-3.6b", "--cluster", "tpuv4-torus", "--devices", "64", "--json"], {}),
    ("g-h100-leafspine", ["plan", "--model", "llama3-8b", "--cluster", "h100-leafspine", "--devices", "128",
                          "--json"], {}),
    ("g-h100-dragonfly", ["plan", "--model", "gpt-7.5b", "--cluster", "h100-dragonfly", "--devices", "128",
                          "--json"], {}),
    ("g-dgx-a100-graph", ["plan", "--model", "gpt-3.6b", "--cluster", "dgx-a100-graph", "--devices", "128",
                          "--json"], {}),
    ("g-dgx-h100-graph", ["plan", "--model", "llama2-13b", "--cluster", "dgx-h100-graph", "--devices", "256",
                          "--json"], {}),
    ("g-tpuv4-fattree-graph", ["plan", "--model", "bert-large", "--cluster", "tpuv4-fattree-graph", "--devices",
                               "64", "--json"], {}),
    ("g-h100-spineleaf-graph", ["plan", "--model", "gpt-18b", "--cluster", "h100-spineleaf-graph", "--devices",
                                "128", "--json"], {}),
    ("g-eval-fattree", ["evaluate", "--model", "llama2-7b", "--cluster", "h100-fattree", "--devices", "128",
                        "--tp", "4", "--pp", "2", "--dp", "16", "--mbs", "1", "--sp", "--zero", "1",
                        "--rank-order", "tp-cp-ep-pp-dp", "--json"], {}),
    # cluster and model files
    ("f-graph-json", ["plan", "--model", "gpt-1.7b", "--cluster", "{data}/graphs/small.json", "--json"], {}),
    ("f-graph-graphml", ["plan", "--model", "gpt-1.7b", "--cluster", "{data}/graphs/small.graphml", "--json"], {}),
    ("f-graph-yaml", ["evaluate", "--model", "gpt-1.7b", "--cluster", "{data}/graphs/small.yaml",
                      "--tp", "1", "--pp", "2", "--dp", "2", "--mbs", "1", "--zero", "1", "--json"], {}),
    ("f-tier-cluster-json", ["plan", "--model", "{inputs}/model.yaml", "--cluster", "{inputs}/cluster.json",
                             "--json"], {}),
    ("f-tier-cluster-yaml", ["plan", "--model", "llama2-7b", "--cluster", "{inputs}/cluster.yaml", "--json"], {}),
    # measured profiles
    ("p-tiny-csv", ["plan", "--profile", "{data}/profiles/tiny.csv", "--cluster", "dgx-a100", "--devices", "64",
                    "--global-batch", "512", "--seq-len", "2048", "--json"], {}),
    ("p-tiny-json", ["plan", "--profile", "{data}/profiles/tiny.json", "--cluster", "h100-spineleaf", "--devices",
                     "32", "--global-batch", "256", "--seq-len", "2048", "--json"], {}),
    ("p-tiny-eval", ["evaluate", "--profile", "{data}/profiles/tiny.csv", "--cluster", "dgx-a100", "--devices", "64",
                     "--global-batch", "512", "--seq-len", "2048", "--tp", "1", "--pp", "2", "--dp", "32",
                     "--mbs", "1", "--json"], {}),
    # NEST artifact instances
    ("i-plan-h100-gpt3-n128", ["plan", "--nest-instance", ART + "/h100_spineLeaf_gpt3_mbs1_n128.json", "--json"], {}),
    ("i-plan-h100-mixtral-n64", ["plan", "--nest-instance", ART + "/h100_spineLeaf_mixtral_mbs1_n64.json",
                                 "--json"], {}),
    ("i-plan-tpu-bert-n64-seq", ["plan", "--nest-instance", ART + "/tpuv4_fatTree_bert_mbs1_n64_seq.json",
                                 "--json"], {}),
    ("i-plan-tpu-llama3-mbs2-n256", ["plan", "--nest-instance",
                                     ART + "/tpuv4_fatTree_mbs2_llama3_mbs2_n256.json", "--json"], {}),
    ("i-eval-manual-h100-gpt3-n128", ["evaluate", "--nest-instance", ART + "/h100_spineLeaf_gpt3_mbs1_n128.json",
                                      "--baseline", "Manual", "--json"], {}),
    ("i-eval-manual-tpu-mixtral-n128", ["evaluate", "--nest-instance",
                                        ART + "/tpuv4_fatTree_mixtral_mbs1_n128.json", "--baseline", "Manual",
                                        "--json"], {}),
    ("i-eval-phaze-tpu-llama2-n64", ["evaluate", "--nest-instance", ART + "/tpuv4_fatTree_llama2_mbs1_n64.json",
                                     "--baseline", "Phaze", "--json"], {}),
    ("i-eval-mcmc-h100-llama3-n128", ["evaluate", "--nest-instance", ART + "/h100_spineLeaf_llama3_mbs1_n128.json",
                                      "--baseline", "MCMC", "--json"], {}),
    # the overlap switches
    ("o-grad-reduce", ["plan", "--model", "llama2-70b", "--cluster", "dgx-h100", "--devices", "256",
                       "--overlap-grad-reduce", "--json"], {}),
    ("o-param-gather", ["plan", "--model", "gpt-39b", "--cluster", "dgx-a100", "--devices", "256",
                        "--overlap-param-gather", "--json"], {}),
    ("o-tp-comm", ["plan", "--model", "llama3-70b", "--cluster", "dgx-h100", "--devices", "512",
                   "--tp-comm-overlap", "--json"], {}),
    ("o-all-eval", ["evaluate", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--devices", "1024",
                    "--tp", "8", "--pp", "8", "--dp", "16", "--mbs", "1", "--sp", "--zero", "1",
                    "--overlap-grad-reduce", "--overlap-param-gather", "--tp-comm-overlap", "--json"], {}),
    # the rankings
    ("r-closed-form-plan", ["plan", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--devices", "1024",
                            "--ranking", "closed-form", "--json"], {}),
    ("r-closed-form-plan-moe", ["plan", "--model", "mixtral-8x7b", "--cluster", "h100-spineleaf", "--devices",
                                "128", "--ranking", "closed-form", "--json"], {}),
    ("r-schedule-eval-vp", ["evaluate", "--model", "llama2-70b", "--cluster", "dgx-h100", "--devices", "256",
                            "--tp", "8", "--pp", "4", "--vp", "5", "--dp", "8", "--mbs", "1", "--sp",
                            "--zero", "1", "--ranking", "schedule", "--json"], {}),
    ("r-closed-form-eval-vp", ["evaluate", "--model", "llama2-70b", "--cluster", "dgx-h100", "--devices", "256",
                               "--tp", "8", "--pp", "4", "--vp", "5", "--dp", "8", "--mbs", "1", "--sp",
                               "--zero", "1", "--ranking", "closed-form", "--json"], {}),
    # job options
    ("j-fp8", ["plan", "--model", "llama3-70b", "--cluster", "dgx-h100", "--devices", "512", "--dtype", "fp8",
               "--json"], {}),
    ("j-mxfp8-weights", ["plan", "--model", "llama3-70b", "--cluster", "gb200-nvl72", "--devices", "144", "--dtype",
                         "fp8", "--fp8-recipe", "mxfp8", "--fp8-param-gather", "--framework", "megatron", "--json"], {}),
    ("j-fp16", ["plan", "--model", "gpt-7.5b", "--cluster", "dgx-a100", "--devices", "64", "--dtype", "fp16",
                "--json"], {}),
    ("j-fp32-sgd", ["plan", "--model", "gpt-1.7b", "--cluster", "dgx-a100", "--devices", "64", "--dtype", "fp32",
                    "--optimizer", "sgd", "--json"], {}),
    ("j-nccl-plan", ["plan", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--devices", "1024",
                     "--network", "nccl", "--json"], {}),
    ("j-nccl-eval", ["evaluate", "--model", "llama2-13b", "--cluster", "tpuv4-fattree", "--devices", "128",
                     "--network", "nccl", "--tp", "4", "--pp", "2", "--dp", "16", "--mbs", "1", "--json"], {}),
    ("j-no-flash", ["plan", "--model", "llama2-7b", "--cluster", "dgx-a100", "--devices", "64",
                    "--no-flash-attention", "--json"], {}),
    ("j-batch-seq", ["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--devices", "128",
                     "--global-batch", "512", "--seq-len", "16384", "--json"], {}),
    ("j-rank-order", ["plan", "--model", "gpt-18b", "--cluster", "dgx-a100", "--devices", "256",
                      "--rank-order", "tp-cp-ep-pp-dp", "--json"], {}),
    ("j-engine-python", ["plan", "--model", "bert-large", "--cluster", "dgx-a100", "--devices", "8",
                         "--engine", "python", "--json"], {}),
    # evaluate with fixed configurations
    ("e-readme-175b-split", ["evaluate", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--devices", "1024",
                             "--tp", "8", "--pp", "8", "--dp", "16", "--mbs", "1", "--sp", "--zero", "1",
                             "--recompute", "none", "--layers-per-stage", "13,12,12,12,12,12,12,13",
                             "--json"], {}),
    ("e-readme-mixtral-ep-vp", ["evaluate", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--devices", "256",
                                "--global-batch", "256", "--tp", "2", "--pp", "4", "--dp", "32", "--ep", "8",
                                "--cp", "1", "--vp", "2", "--mbs", "1", "--sp", "--zero", "1",
                                "--rank-order", "tp-cp-ep-pp-dp", "--json"], {}),
    ("e-vp-split", ["evaluate", "--model", "gpt-7.5b", "--cluster", "dgx-a100", "--devices", "64",
                    "--tp", "2", "--pp", "4", "--vp", "2", "--dp", "8", "--mbs", "1",
                    "--layers-per-stage", "6,5,5,5,5,5,5,2", "--json"], {}),
    ("e-cp", ["evaluate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--devices", "64", "--seq-len", "32768",
              "--global-batch", "64", "--tp", "4", "--cp", "4", "--pp", "1", "--dp", "4", "--mbs", "1", "--sp",
              "--zero", "1", "--json"], {}),
    ("e-ep-cp-moe", ["evaluate", "--model", "qwen3-30b-a3b", "--cluster", "dgx-h100", "--devices", "128",
                     "--tp", "2", "--cp", "2", "--ep", "4", "--pp", "2", "--dp", "16", "--mbs", "1", "--sp",
                     "--zero", "1", "--json"], {}),
    ("e-zero2", ["evaluate", "--model", "gpt-7.5b", "--cluster", "dgx-a100", "--devices", "64",
                 "--tp", "2", "--pp", "1", "--dp", "32", "--mbs", "2", "--zero", "2", "--json"], {}),
    ("e-zero3", ["evaluate", "--model", "llama2-13b", "--cluster", "dgx-h100", "--devices", "64",
                 "--tp", "1", "--pp", "1", "--dp", "64", "--mbs", "1", "--zero", "3",
                 "--recompute", "full", "--json"], {}),
    ("e-selective", ["evaluate", "--model", "gpt-18b", "--cluster", "dgx-a100", "--devices", "128",
                     "--tp", "8", "--pp", "2", "--dp", "8", "--mbs", "1", "--sp", "--distributed-optimizer",
                     "--recompute", "selective", "--json"], {}),
    ("e-full-split", ["evaluate", "--model", "gpt-39b", "--cluster", "dgx-h100", "--devices", "128",
                      "--tp", "8", "--pp", "4", "--dp", "4", "--mbs", "2", "--recompute", "full",
                      "--layers-per-stage", "12,13,13,12", "--json"], {}),
    ("e-simulate", ["evaluate", "--model", "gpt-1.7b", "--cluster", "dgx-a100", "--devices", "64",
                    "--tp", "1", "--pp", "4", "--dp", "16", "--mbs", "1", "--zero", "1", "--simulate",
                    "--json"], {}),
    # --emit (text) and the listings
    ("t-emit-megatron", ["plan", "--model", "llama3-70b", "--cluster", "dgx-h100", "--devices", "512",
                         "--emit", "megatron"], {"text": True}),
    ("t-emit-deepspeed", ["plan", "--model", "gpt-7.5b", "--cluster", "dgx-a100", "--devices", "64",
                          "--emit", "deepspeed"], {"text": True}),
    ("t-emit-torchtitan", ["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--devices", "64",
                           "--emit", "torchtitan"], {"text": True}),
    ("t-emit-hostfile", ["plan", "--model", "gpt-1.7b", "--cluster", "dgx-h100-rail", "--devices", "64",
                         "--emit", "hostfile"], {"text": True}),
    ("t-models", ["models", "--json"], {}),
    ("t-clusters", ["clusters", "--json"], {}),
    # Hugging Face config.json files
    ("h-llama-2-7b", ["plan", "--model", "{data}/hf/llama-2-7b.json", "--cluster", "dgx-h100", "--devices", "64",
                      "--global-batch", "512", "--json"], {}),
    ("h-mixtral-8x7b", ["plan", "--model", "{data}/hf/mixtral-8x7b.json", "--cluster", "dgx-h100", "--devices",
                        "128", "--global-batch", "256", "--seq-len", "4096", "--json"], {}),
    ("h-qwen3-30b-a3b", ["plan", "--model", "{data}/hf/qwen3-30b-a3b.json", "--cluster", "dgx-a100", "--devices",
                         "128", "--global-batch", "256", "--seq-len", "4096", "--json"], {}),
    ("h-gpt2", ["plan", "--model", "{data}/hf/gpt2.json", "--cluster", "dgx-a100", "--devices", "16",
                "--global-batch", "256", "--json"], {}),
    ("h-bert", ["evaluate", "--model", "{data}/hf/bert-large-uncased.json", "--cluster", "dgx-a100", "--devices",
                "16", "--global-batch", "256", "--seq-len", "512", "--tp", "1", "--pp", "1", "--dp", "16",
                "--mbs", "4", "--json"], {}),
    # failures: no feasible plan (3), bad input (2)
    ("x-infeasible-plan", ["plan", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--devices", "8", "--json"],
     {"expect": 3}),
    ("x-infeasible-eval", ["evaluate", "--model", "llama2-70b", "--cluster", "dgx-a100", "--devices", "8",
                           "--tp", "1", "--pp", "1", "--dp", "8", "--mbs", "1", "--json"], {"expect": 3}),
    ("x-unknown-model", ["plan", "--model", "gpt5", "--cluster", "dgx-a100", "--json"], {"expect": 2}),
    ("x-bad-devices", ["plan", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--devices", "100", "--json"],
     {"expect": 2}),
    ("x-bad-dtype", ["plan", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--dtype", "int4", "--json"],
     {"expect": 2}),
    ("x-bad-cluster-file", ["plan", "--model", "gpt-1.7b", "--cluster", "{data}/bad/cluster/zero_fanout.yaml",
                            "--json"], {"expect": 2}),
    ("x-bad-hf", ["plan", "--model", "{data}/bad/hf/negative_heads.json", "--cluster", "dgx-a100",
                  "--devices", "64", "--global-batch", "64", "--json"], {"expect": 2}),
    ("x-eval-missing-tp", ["evaluate", "--model", "gpt-1.7b", "--cluster", "dgx-a100", "--devices", "64",
                           "--pp", "2", "--json"], {"expect": 2}),
    ("x-bad-split", ["evaluate", "--model", "gpt-1.7b", "--cluster", "dgx-a100", "--devices", "64",
                     "--tp", "1", "--pp", "2", "--dp", "32", "--mbs", "1", "--layers-per-stage", "10,10",
                     "--json"], {"expect": 2}),
    ("x-instance-with-model", ["plan", "--nest-instance", ART + "/h100_spineLeaf_gpt3_mbs1_n128.json",
                               "--model", "gpt-1.7b", "--json"], {"expect": 2}),
    ("x-unknown-baseline", ["evaluate", "--nest-instance", ART + "/h100_spineLeaf_gpt3_mbs1_n64.json",
                            "--baseline", "Manual", "--json"], {"expect": 2}),
    ("x-nccl-on-graph", ["plan", "--model", "gpt-1.7b", "--cluster", "h100-fattree", "--devices", "64",
                         "--network", "nccl", "--json"], {"expect": 2}),
]

# Spec files the corpus uses ("{inputs}/NAME"), written by this script (so they cannot
# drift with the checkout): a model preset with overrides and a tier cluster.
INPUT_FILES = {
    "model.yaml": "base: gpt-1.7b\nname: gpt-1.7b-short\nseq_len: 1024\n",
    "cluster.json": json.dumps({
        "name": "lab", "device": {"base": "a100-40gb", "memory_GiB": 24},
        "tiers": [{"name": "nvlink", "fanout": 4, "bandwidth_GBps": 300, "latency_us": 3},
                  {"name": "eth", "fanout": 4, "bandwidth_GBps": 12.5, "latency_us": 20,
                   "oversubscription": 2}]}, indent=2) + "\n",
    "cluster.yaml": ("name: lab-h100\n"
                     "device: {base: h100-sxm, memory_GiB: 80, gemm_efficiency: 0.6}\n"
                     "tiers:\n"
                     "  - {name: nvlink, fanout: 8, bandwidth_GBps: 450, latency_us: 2}\n"
                     "  - {name: leaf, fanout: 4, bandwidth_GBps: 50, latency_us: 5}\n"
                     "  - {name: spine, fanout: 2, bandwidth_GBps: 25, latency_us: 8, oversubscription: 2}\n"),
}

# Fields that follow the machine, not the plan.
TIMING_KEYS = {"solve_time_s"}           # removed wherever they appear
RUNTIME_MACHINE_KEYS = {"threads"}       # removed from every "runtime" mapping

SCENARIO_TIMEOUT_S = 900


# -- helpers ------------------------------------------------------------------------------

def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def git(repo: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise SetupError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


class SetupError(Exception):
    """A side could not be prepared (git, venv, pip)."""


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "nest-compare"


def clean_env(threads: str | None) -> dict:
    """The environment of every scenario: nothing that redirects imports, fixed hashing."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH", "VIRTUAL_ENV")}
    env["PYTHONHASHSEED"] = "0"
    env["PYTHONDONTWRITEBYTECODE"] = "1"   # never write __pycache__ into a checkout
    env["PYTHONWARNINGS"] = "ignore"       # warnings on stderr are not behaviour
    env["MPLBACKEND"] = "Agg"
    if threads is not None:
        env["OMP_NUM_THREADS"] = threads
    return env


def probe(python: str, env: dict) -> dict:
    """Where ``python`` imports nest from, and whether its compiled core loads."""
    code = ("import json, nest, nest._core as c; "
            "print(json.dumps({'file': nest.__file__, 'version': getattr(nest, '__version__', '?'), "
            "'openmp': bool(c.has_openmp())}))")
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, env=env,
                          cwd=tempfile.gettempdir())
    if done.returncode != 0:
        raise SetupError(f"{python} cannot import nest:\n{done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- building the old side ----------------------------------------------------------------

def build_old(repo: Path, commit: str, keep: bool, env: dict) -> str:
    """The python of a venv with OLD's nest installed; built once per commit, then cached."""
    root = cache_root() / commit
    venv = root / "venv"
    python = venv / "bin" / "python"
    marker = root / "ok.json"
    if marker.exists() and python.exists():
        try:
            probe(str(python), env)
            log(f"old: reusing {venv}")
            return str(python)
        except SetupError as error:
            log(f"old: cached venv unusable, rebuilding ({error})")
    shutil.rmtree(venv, ignore_errors=True)
    marker.unlink(missing_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    worktree = Path(tempfile.mkdtemp(prefix=f"nest-compare-{commit[:12]}-")) / "src"
    log(f"old: building {commit[:12]} in worktree {worktree} into {venv} (about a minute)")
    started = time.perf_counter()
    git(repo, "worktree", "add", "--detach", str(worktree), commit)
    build_log = root / "build.log"
    try:
        with open(build_log, "w") as out:
            steps = [[sys.executable, "-m", "venv", str(venv)],
                     [str(python), "-m", "pip", "install", "--no-input", f"{worktree}[graphs]"]]
            for step in steps:
                out.write(f"$ {' '.join(step)}\n")
                out.flush()
                done = subprocess.run(step, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=str(root))
                if done.returncode != 0:
                    raise SetupError(f"{' '.join(step)} failed (exit {done.returncode}); "
                                     f"see {build_log}:\n" + build_log.read_text()[-3000:])
            # refs whose pyproject has no [graphs] extra: the graph presets still need scipy
            if subprocess.run([str(python), "-c", "import scipy"], capture_output=True).returncode:
                subprocess.run([str(python), "-m", "pip", "install", "--no-input", "scipy"],
                               stdout=out, stderr=subprocess.STDOUT, env=env, check=False)
        info = probe(str(python), env)
        marker.write_text(json.dumps({"commit": commit, "built": time.strftime("%Y-%m-%dT%H:%M:%S"),
                                      "build_s": round(time.perf_counter() - started, 1),
                                      "python": sys.version.split()[0], **info}, indent=2) + "\n")
        log(f"old: built in {time.perf_counter() - started:.0f} s")
    finally:
        if keep:
            log(f"old: keeping worktree {worktree}")
        else:
            git(repo, "worktree", "remove", "--force", str(worktree), check=False)
            git(repo, "worktree", "prune", check=False)
            shutil.rmtree(worktree.parent, ignore_errors=True)
    return str(python)


# -- inputs -------------------------------------------------------------------------------

def prepare_inputs(repo: Path, commit: str | None, where: Path, corpus) -> dict[str, str]:
    """Placeholder -> absolute directory; the spec files written; missing data from OLD."""
    inputs = where / "inputs"
    inputs.mkdir(parents=True)
    for name, text in INPUT_FILES.items():
        (inputs / name).write_text(text)
    data = repo / "tests" / "data"
    roots = {"{data}": str(data), "{artifact}": str((repo.parent / "shared" / "data" / "nest-artifact").resolve()),
             "{inputs}": str(inputs)}
    fallback = where / "old-data"
    missing = []
    for _, args, _ in corpus:
        for arg in args:
            if arg.startswith("{data}/") and not (data / os.path.normpath(arg[len("{data}/"):])).exists():
                missing.append(os.path.normpath(arg[len("{data}/"):]))
            if arg.startswith("{artifact}/") and not Path(roots["{artifact}"], arg[len("{artifact}/"):]).exists():
                raise SetupError(f"missing NEST artifact instance {arg[len('{artifact}/'):]} in "
                                 f"{roots['{artifact}']}")
    if missing:
        if commit is None:
            raise SetupError(f"missing in {data}: {', '.join(missing)}")
        log(f"inputs: {len(missing)} tests/data file(s) not in the checkout; using OLD's "
            f"({', '.join(missing)})")
        # every data path then points into one copy of OLD's tests/data, for both sides
        for rel in git(repo, "ls-tree", "-r", "--name-only", commit, "tests/data").splitlines():
            target = fallback / Path(rel).relative_to("tests/data")
            target.parent.mkdir(parents=True, exist_ok=True)
            blob = subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{rel}"], capture_output=True)
            target.write_bytes(blob.stdout)
        roots["{data}"] = str(fallback)
    return roots


def resolve(args: list[str], roots: dict[str, str]) -> list[str]:
    out = []
    for arg in args:
        for key, value in roots.items():
            if arg.startswith(key + "/"):
                arg = os.path.normpath(value + arg[len(key):])
        out.append(arg)
    return out


# -- running and normalising --------------------------------------------------------------

def strip_timing(obj, parent_key: str | None = None):
    if isinstance(obj, dict):
        return {k: strip_timing(v, k) for k, v in obj.items()
                if k not in TIMING_KEYS and not (parent_key == "runtime" and k in RUNTIME_MACHINE_KEYS)}
    if isinstance(obj, list):
        return [strip_timing(v) for v in obj]
    if isinstance(obj, int) and not isinstance(obj, bool) and abs(obj) < 2**53:
        return float(obj)  # 0 and 0.0 are one JSON number
    return obj


def run_scenario(python: str, sid: str, args: list[str], options: dict, env: dict, scratch: Path) -> dict:
    """One run of ``python -m nest ARGS`` in a fresh directory -> the normalised record."""
    cwd = Path(tempfile.mkdtemp(prefix=f"{sid}-", dir=scratch))
    started = time.perf_counter()
    try:
        done = subprocess.run([python, "-m", "nest", *args], capture_output=True, text=True, env=env,
                              cwd=str(cwd), timeout=SCENARIO_TIMEOUT_S, stdin=subprocess.DEVNULL)
        code, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired:
        code, stdout, stderr = "timeout", "", f"timed out after {SCENARIO_TIMEOUT_S} s"
    finally:
        shutil.rmtree(cwd, ignore_errors=True)
    seconds = time.perf_counter() - started
    record: dict = {"exit": code}
    notes = []
    if code != 0:
        record["stderr"] = stderr
    if options.get("text") or code != 0:
        record["stdout"] = stdout
    else:
        try:
            record["stdout"] = strip_timing(json.loads(stdout))
        except ValueError:
            record["stdout"] = stdout
            notes.append("stdout is not JSON")
    return {"record": record, "seconds": seconds, "notes": notes}


def canonical(record: dict) -> str:
    return json.dumps(record, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def _key(path: str, key) -> str:
    return f"{path}.{key}" if isinstance(key, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) \
        else f"{path}[{json.dumps(key)}]"


def _short(value) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."


def first_difference(old, new, path: str = "$") -> str | None:
    """The JSON path of the first difference (keys in sorted order), with both values."""
    if type(old) is not type(new):
        return f"{path}: {_short(old)} vs {_short(new)}"
    if isinstance(old, dict):
        for key in sorted(set(old) | set(new)):
            if key not in new:
                return f"{_key(path, key)}: only in old"
            if key not in old:
                return f"{_key(path, key)}: only in new"
            found = first_difference(old[key], new[key], _key(path, key))
            if found:
                return found
        return None
    if isinstance(old, list):
        for i, (a, b) in enumerate(zip(old, new)):
            found = first_difference(a, b, f"{path}[{i}]")
            if found:
                return found
        if len(old) != len(new):
            return f"{path}: length {len(old)} vs {len(new)}"
        return None
    if isinstance(old, str) and old != new:
        a, b = old.splitlines(), new.splitlines()
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return f"{path} line {i + 1}: {x[:70]!r} vs {y[:70]!r}"
        return f"{path}: {len(a)} vs {len(b)} lines"
    if json.dumps(old) != json.dumps(new):
        return f"{path}: {_short(old)} vs {_short(new)}"
    return None


def explain(old: dict, new: dict) -> str:
    if old["exit"] != new["exit"]:
        return f"exit code {old['exit']} vs {new['exit']}" + (
            f" (stderr: {(old.get('stderr') or new.get('stderr') or '').strip()[-200:]!r})")
    if old.get("stderr") != new.get("stderr"):
        return "stderr " + (first_difference(old.get("stderr"), new.get("stderr"), "") or "").lstrip()
    root = "stdout" if isinstance(old.get("stdout"), str) and isinstance(new.get("stdout"), str) else "$"
    return first_difference(old.get("stdout"), new.get("stdout"), root) or "canonical text differs"


def run_side(name: str, python: str, corpus, roots, env, jobs: int, scratch: Path) -> tuple[dict, float]:
    started = time.perf_counter()
    results: dict[str, dict] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run_scenario, python, sid, resolve(args, roots), options, env, scratch): sid
                   for sid, args, options in corpus}
        for n, future in enumerate(concurrent.futures.as_completed(futures), 1):
            sid = futures[future]
            results[sid] = future.result()
            log(f"  {name} [{n:>3}/{len(corpus)}] {sid:<34} exit {results[sid]['record']['exit']!s:<3} "
                f"{results[sid]['seconds']:6.2f} s")
    return results, time.perf_counter() - started


# -- main ---------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="See the module docstring for what is compared.")
    parser.add_argument("old_ref", nargs="?", help="git ref of the old side (any commit of this repository)")
    parser.add_argument("--new-python", metavar="PATH", default=sys.executable,
                        help="interpreter whose nest is the new side (default: the one running this script)")
    parser.add_argument("--jobs", type=int, default=2, help="scenarios run at once (default 2)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary git worktree of OLD_REF")
    parser.add_argument("--record", metavar="DIR", help="write DIR/<side>/<id>.json, the normalised outputs")
    parser.add_argument("--side", choices=("both", "old", "new"), default="both",
                        help="run both sides and compare (default), or one side only (with --record)")
    parser.add_argument("--only", metavar="IDS", help="comma-separated scenario ids or id prefixes")
    parser.add_argument("--list", action="store_true", help="print the corpus and exit")
    args = parser.parse_args(argv)

    ids = [sid for sid, _, _ in CORPUS]
    assert len(ids) == len(set(ids)), "duplicate scenario ids in CORPUS"
    corpus = CORPUS
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        corpus = [s for s in CORPUS if any(s[0] == w or s[0].startswith(w) for w in wanted)]
        if not corpus:
            parser.error(f"--only {args.only}: no scenario matches")
    if args.list:
        for sid, cmd, options in corpus:
            print(f"{sid:<34} nest {' '.join(cmd)}" + (f"   # exit {options['expect']}" if "expect" in options else ""))
        print(f"{len(corpus)} scenarios")
        return 0
    if args.side != "new" and not args.old_ref:
        parser.error("OLD_REF is required (unless --side new)")
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")

    repo = Path(git(Path(__file__).resolve().parent, "rev-parse", "--show-toplevel"))
    threads = os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // args.jobs))
    env = clean_env(threads)
    scratch = Path(tempfile.mkdtemp(prefix="nest-compare-run-"))
    status = 0
    try:
        commit = git(repo, "rev-parse", "--verify", f"{args.old_ref}^{{commit}}") if args.old_ref else None
        roots = prepare_inputs(repo, commit, scratch, corpus)
        pythons = {}
        if args.side in ("both", "old"):
            pythons["old"] = build_old(repo, commit, args.keep, env)
        if args.side in ("both", "new"):
            pythons["new"] = args.new_python
        for side, python in pythons.items():
            info = probe(python, env)
            label = f"{args.old_ref} = {commit[:12]}" if side == "old" else "new"
            log(f"{side}: {python} -> {info['file']} ({label}; openmp {info['openmp']})")
        log(f"{len(corpus)} scenarios, {args.jobs} at a time, OMP_NUM_THREADS={threads}")

        results, walls = {}, {}
        for side, python in pythons.items():
            results[side], walls[side] = run_side(side, python, corpus, roots, env, args.jobs, scratch)
            log(f"{side}: {walls[side]:.1f} s wall for {len(corpus)} scenarios")
            if args.record:
                out = Path(args.record) / side
                out.mkdir(parents=True, exist_ok=True)
                for sid, result in results[side].items():
                    (out / f"{sid}.json").write_text(canonical(result["record"]))

        different = warned = 0
        width = max(len(s[0]) for s in corpus)
        for sid, _, options in corpus:
            expect = options.get("expect", 0)
            notes = []
            for side in pythons:
                got = results[side][sid]["record"]["exit"]
                if got != expect:
                    notes.append(f"{side} exit {got}, corpus expects {expect}")
                notes += [f"{side}: {n}" for n in results[side][sid]["notes"]]
            if len(pythons) == 2:
                old, new = results["old"][sid]["record"], results["new"][sid]["record"]
                if canonical(old) == canonical(new):
                    line = "same"
                else:
                    different += 1
                    line = f"DIFFERENT: {explain(old, new)}"
            else:
                (side,) = pythons
                line = f"ran ({side} only, exit {results[side][sid]['record']['exit']})"
            if notes:
                warned += 1
                line += f"   [warning: {'; '.join(notes)}]"
            print(f"{sid:<{width}}  {line}", flush=True)

        times = ", ".join(f"{side} {walls[side]:.1f} s" for side in pythons)
        if len(pythons) == 2:
            print(f"\n{len(corpus) - different} same, {different} different of {len(corpus)} scenarios "
                  f"({args.old_ref} = {commit[:12]} vs {pythons['new']}); wall: {times}"
                  + (f"; {warned} with warnings" if warned else ""))
            status = 1 if different else 0
        else:
            print(f"\n{len(corpus)} scenarios run; wall: {times}" + (f"; {warned} with warnings" if warned else ""))
        if args.record:
            print(f"normalised outputs in {Path(args.record).resolve()}")
    except SetupError as error:
        log(f"compare_outputs: {error}")
        status = 2
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
