"""Human-readable summary of a plan (the default output of ``nest plan``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..frameworks import framework
from ..result import Plan
from ..units import GiB

if TYPE_CHECKING:
    from ..schedule.simulate import SimResult


def _ranges(values: tuple[int, ...], most: int = 3) -> str:
    """``0-7,16-23`` style compression of sorted integers; beyond ``most`` runs the rest
    is summarised (``--json`` has every rank)."""
    parts, start, prev = [], None, None
    for v in values:
        if start is None:
            start = prev = v
        elif v == prev + 1:
            prev = v
        else:
            parts.append(f"{start}-{prev}" if prev != start else f"{start}")
            start = prev = v
    if start is not None:
        parts.append(f"{start}-{prev}" if prev != start else f"{start}")
    if len(parts) > most:
        return ",".join(parts[:most - 1]) + f",... ({len(values)} in {len(parts)} runs)"
    return ",".join(parts)


def _layers(names: tuple[str, ...]) -> str:
    blocks = [n for n in names if n.startswith("block.")]
    others = [n for n in names if not n.startswith("block.")]
    text = []
    if names and names[0] == "embedding":
        text.append("embedding")
    if blocks:
        first, last = blocks[0].split(".")[1], blocks[-1].split(".")[1]
        text.append(f"blocks {first}-{last}" if first != last else f"block {first}")
    if names and names[-1] == "head" and "head" in others:
        text.append("head")
    return " + ".join(text)


def _memory_parts(plan: Plan) -> str:
    """The fullest rank's memory at its activation peak, by part."""
    peak = plan.peak_memory
    if peak is None:
        return ""
    live = "+".join(map(str, peak.live))
    return (f" (pipeline rank {peak.rank} at its activation peak)\n              weights {peak.weights / GiB:.2f}  "
            f"gradients {peak.gradients / GiB:.2f}  optimizer {peak.optimizer / GiB:.2f}  activations "
            f"{peak.activations / GiB:.2f} ({live} micro-batches live per chunk)  transient {peak.transient / GiB:.2f}  "
            f"reserve {peak.reserve / GiB:.2f} GiB")


def _host_memory(plan: Plan) -> list[str]:
    """The host memory the most offloading rank fills, when the plan offloads."""
    fullest = max(plan.memory, key=lambda d: d.host, default=None)
    if fullest is None or not fullest.host:
        return []
    p = plan.parallelism
    what = " and ".join(name for name, on in (("offloaded optimizer state", p.get("optimizer_offload_fraction")),
                                               ("activation copies", p.get("activation_offload_layers"))) if on)
    return [f"host memory   {fullest.host / GiB:10.1f} GiB of {fullest.host_capacity / GiB:.1f} GiB usable per device "
            f"({what}, pipeline rank {fullest.rank})"]


def _plausibility(plan: Plan) -> str:
    """The plan's model TFLOP/s per device next to the fastest published run of its kind."""
    ref = plan.published_reference
    if ref is None:
        return ""
    moe = "MoE" if ref.moe else "dense"
    line = (f"   ({plan.model_tflops_per_device:.0f} model TFLOP/s per device; fastest published {moe} "
            f"{ref.dtype} run on {ref.family.upper()}: {ref.tflops_per_gpu:.0f}, {ref.run}")
    if plan.model_tflops_per_device > ref.tflops_per_gpu:
        line += f"; this plan is {plan.model_tflops_per_device / ref.tflops_per_gpu:.2f}x that: optimistic"
    return line + ")"


def render(plan: Plan, command: str = "plan") -> str:
    """A multi-line text report of ``plan``, headed by the ``command`` that made it (plan,
    evaluate). MFU reads n/a where nest knows no model FLOPs (measured layers), and no
    time prints as -0.0000."""
    p = plan.parallelism
    m, c, j = plan.model, plan.cluster, plan.job
    mfu = f"{100 * plan.mfu:10.1f} %" if plan.mfu > 0 else f"{'n/a':>10}   (no model FLOPs for measured layers)"
    lines = [
        f"nest {command}: {m['name']} ({m['parameters'] / 1e9:.2f}B parameters) on {c['name']} "
        f"({c['devices']} x {c['device']})",
        f"job: global batch {j['global_batch']} x seq {j['seq_len']} tokens, {j['dtype']}"
        + (f" ({j.get('fp8_recipe', 'delayed')} scaling{', FP8 weights' if j.get('fp8_param_gather') else ''})"
           if j["dtype"] == "fp8" else "")
        + ("" if j.get("framework", "any") == "any" else f", for {framework(j['framework']).version}"),
        "",
        f"parallelism: TP {p['tp']}  PP {p['pp']}  DP {p['dp']}  CP {p['cp']}  EP {p['ep']}  "
        + (f"ETP {p['expert_tp']}  " if p.get("expert_tp", 1) > 1 else "")
        + f"VP {p['vp']}  SP {'on' if p['sp'] else 'off'}  ZeRO {p['zero']}  recompute {p['recompute']}"
        + (f"  optimizer offload {p['optimizer_offload_fraction']:g}" if p.get("optimizer_offload_fraction") else "")
        + (f"  activation offload {p['activation_offload_layers']} layers" if p.get("activation_offload_layers")
           else ""),
        f"             micro-batch {p['micro_batch']} x {p['num_microbatches']} per step, "
        f"rank order {p['rank_order']}, {plan.devices_used} of {c['devices']} devices used"
        + (f": {plan.devices_idle_reason}" if plan.devices_idle_reason else ""),
        "",
        f"step time     {plan.step_time_s:10.4f} s"
        + ("" if plan.closed_form_step_time_s is None
           else f"   (exact schedule; the stage DP's closed form of this split: {plan.closed_form_step_time_s:.4f} s)"),
        f"throughput    {plan.throughput_tokens_per_s:10.0f} tokens/s "
        f"({plan.throughput_tokens_per_s / plan.devices_used:.0f} per device)",
        f"MFU           {mfu}" + _plausibility(plan),
        f"memory        {plan.memory_max_bytes / GiB:10.1f} GiB of {plan.memory_capacity_bytes / GiB:.1f} "
        "GiB per device" + _memory_parts(plan),
        *_host_memory(plan),
        "",
        "time breakdown (s): " + "  ".join(f"{k} {abs(v) if v == 0 else v:.4f}" for k, v in plan.breakdown_s.items()),
        "",
        f"{'stage':>5}  {'layers':<26} {'ranks':<32} {'time/mb (ms)':>12} {'memory (GiB)':>12}",
    ]
    for s in plan.stages:
        lines.append(f"{s.index:>5}  {_layers(s.layers):<26} {_ranges(s.ranks or s.devices):<32} "
                     f"{1e3 * s.time_s:>12.3f} {s.memory_bytes / GiB:>12.2f}")
    where = plan.placement
    if where is not None and where.on_graph:
        lines += ["", f"placement: rank r on device order[r] of the graph (locality order): ranks 0-"
                      f"{len(where.device) - 1} on {where.device[0]} .. {where.device[-1]}, {len(where.hosts)} "
                      "hosts (--json lists every rank, --emit hostfile writes a rankfile)"]
    run = plan.runtime
    if plan.engine == "python":
        engine = "the pure-Python reference DP"
    elif run["openmp"]:
        engine = f"the C++ DP, OpenMP, {run['threads']} thread{'s' if run['threads'] > 1 else ''}"
    else:
        engine = "the C++ DP, without OpenMP"
    lines += ["", f"solved in {plan.solve_time_s:.3f} s ({plan.candidates_evaluated} candidates "
                  f"solved by {engine}, of {plan.candidates_total} priced)"]
    return "\n".join(lines)


def render_simulation(result: SimResult) -> str:
    """A few lines for ``nest evaluate --simulate``: both step times and where they differ."""
    lines = [f"simulated step time   {result.step_time_s:.6g} s ({result.schedule}, p={result.pp}, "
             f"v={result.vp}, m={result.micro_batches})"]
    if result.predicted_s is not None:
        lines.append(f"nest step time        {result.predicted_s:.6g} s "
                     f"({result.relative_difference * 100:+.2f}% vs. simulated; the schedule priced "
                     "by nest's compiled core)")
    if result.closed_form_s is not None:
        lines.append(f"closed-form step time {result.closed_form_s:.6g} s "
                     f"({result.closed_form_difference * 100:+.2f}% vs. simulated; the DP's objective "
                     "for choosing the split)")
    lines.append(f"  pipeline {result.pipeline_time_s:.6g} s, then gradient sync and optimizer "
                 f"{result.sync_time_s:.6g} s")
    times = [s.time_s for s in result.stages]
    if len(times) > 1 and max(times) > 0:
        lines.append(f"  stage times per micro-batch {min(times):.4g}..{max(times):.4g} s"
                     + (": the closed form charges every chunk before the last as the slowest of them"
                        if result.vp > 1 else ""))
    return "\n".join(lines) + "\n"
