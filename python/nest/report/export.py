"""A plan -> how to launch it: the target framework's configuration, or the rank map.

``emit(plan_dict, fmt)`` takes the JSON document of :meth:`nest.result.Plan.to_dict` and
returns text for ``fmt``:

``megatron``, ``deepspeed``, ``torchtitan``
    the launch configuration of :mod:`nest.frameworks` (Megatron-LM arguments, a DeepSpeed
    config JSON, a torchtitan command line), after checking the plan against that
    framework's rules: a plan made for another framework (or edited) that the framework
    cannot run is a SpecError naming the rule, never a silently different launch.
``hostfile``
    the rank -> host and GPU map of the plan's ``placement`` as an Open MPI rankfile, one
    line per rank, ``rank R=HOST slot=S``: rank ``R`` runs on ``HOST`` and uses its GPU
    ``S``. A rankfile binds rank ``R`` to CPU slot ``S`` and does not choose GPUs, so the
    header says how to launch it (``--bind-to none`` and ``CUDA_VISIBLE_DEVICES`` per rank
    from the file), and how to launch the same map with torchrun when torchrun can express
    it (every host's ranks consecutive, ascending GPUs: ``RANK = node_rank x P +
    LOCAL_RANK``, ``LOCAL_RANK`` the GPU).
"""

from __future__ import annotations

from ..errors import SpecError
from ..frameworks import framework
from ..specs import FRAMEWORKS

FORMATS = tuple(f for f in FRAMEWORKS if f != "any")
"""The frameworks :func:`emit` writes launch configurations for."""

PLACEMENT_FORMATS = ("hostfile",)
"""The rank -> device maps :func:`emit` writes (from the plan's ``placement``)."""


def emit(plan_dict: dict, fmt: str) -> str:
    """The launch configuration of ``plan_dict`` (``Plan.to_dict()``) for ``fmt``."""
    if fmt not in FORMATS + PLACEMENT_FORMATS:
        raise SpecError(f"emit = {fmt!r}: unknown format (known: {', '.join(FORMATS + PLACEMENT_FORMATS)})")
    if fmt == "hostfile":
        return _hostfile(plan_dict)
    return framework(fmt).emit(plan_dict)


def launch_notes(plan_dict: dict, fmt: str) -> list[str]:
    """The framework version the launch configuration targets and what launching it
    needs besides the emitted text (environment variables)."""
    if fmt not in FORMATS:
        return []
    target = framework(fmt)
    return [f"launch configuration for {target.version}", *target.notes(plan_dict)]


def _hostfile(plan_dict: dict) -> str:
    """An Open MPI rankfile of the plan's placement (module docstring)."""
    placement = plan_dict.get("placement") if isinstance(plan_dict, dict) else None
    ranks = placement.get("ranks") if isinstance(placement, dict) else None
    if not isinstance(ranks, list) or not ranks:
        raise SpecError(f"plan.placement = {placement!r}: needs ranks (a plan of nest >= the placement output)")
    for i, r in enumerate(ranks):
        if not (isinstance(r, dict) and r.get("rank") == i and "host" in r and "slot" in r):
            raise SpecError(f"plan.placement.ranks[{i}] = {r!r}: needs rank {i}, host and slot")
    hosts = list(dict.fromkeys(str(r["host"]) for r in ranks))
    per_host = {h: [r for r in ranks if str(r["host"]) == h] for h in hosts}
    width = max(len(v) for v in per_host.values())
    contiguous = all(
        [r["rank"] for r in members] == list(range(members[0]["rank"], members[0]["rank"] + len(members)))
        and [r["slot"] for r in members] == list(range(len(members))) and len(members) == width
        for members in per_host.values())
    lines = [f"# nest placement: {len(ranks)} ranks on {len(hosts)} hosts (Open MPI rankfile: rank R=HOST slot=S, "
             "rank R uses GPU S of HOST)",
             "# the rankfile places ranks; it would bind rank R to CPU slot S, not to GPU S. Launch with",
             f"#   mpirun -np {len(ranks)} --rankfile THIS_FILE --bind-to none sh -c 'export CUDA_VISIBLE_DEVICES="
             "$(sed -n \"s/^rank $OMPI_COMM_WORLD_RANK=[^ ]* slot=//p\" THIS_FILE) LOCAL_RANK=0; exec COMMAND'",
             "#   (each rank sees only its GPU, as cuda:0)"]
    if contiguous:
        lines.append(f"# or torchrun --nnodes {len(hosts)} --nproc-per-node {width} --node-rank <i> ...: host i is "
                     f"the i-th host below ({hosts[0]} is 0); RANK = node_rank * {width} + LOCAL_RANK, "
                     "LOCAL_RANK is the GPU")
    else:
        lines.append("# torchrun cannot express this placement (a host's ranks are not consecutive); "
                     "use the rankfile")
    lines += [f"rank {r['rank']}={r['host']} slot={r['slot']}" for r in ranks]
    return "\n".join(lines)
