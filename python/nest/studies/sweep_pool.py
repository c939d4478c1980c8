"""The executors of ``nest sweep``: a local spawn process pool whose workers die with the
sweep, and Dask.

Local workers. Spawned (never forked after OpenMP started), single-threaded
(``OMP_NUM_THREADS=1``), and tied to the sweep's process: on Linux each worker asks the
kernel for ``SIGKILL`` when its parent dies (``prctl(PR_SET_PDEATHSIG)``), elsewhere a
thread polls ``os.getppid()``; a ``kill -9`` of the sweep therefore leaves no worker
computing. Ctrl-C is the sweep's alone: SIGINT is blocked while the workers start and
ignored in them (a terminal sends it to the whole process group), and when the sweep
stops early it kills its workers instead of waiting for their batches.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import threading
import time
from urllib.parse import urlsplit

from ..errors import SpecError

_PR_SET_PDEATHSIG = 1


def cpu_count() -> int:
    """CPUs this process may run on: its affinity mask (``os.process_cpu_count``), capped
    by a cgroup v2 CPU quota (``cpu.max`` of a container)."""
    if hasattr(os, "process_cpu_count"):
        count = os.process_cpu_count()
    elif hasattr(os, "sched_getaffinity"):
        count = len(os.sched_getaffinity(0))
    else:
        count = os.cpu_count()
    count = count or 1
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            count = min(count, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return count


def _die_with_parent() -> bool:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent: int) -> None:
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(1)


def init_worker(parent: int) -> None:
    """Initializer of every local worker (``parent``: the sweep's pid)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if not _die_with_parent():
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    if os.getppid() != parent:  # the sweep died before the request took effect
        os._exit(1)


def _kill_workers(pool) -> None:
    kill = getattr(pool, "kill_workers", None)  # Python 3.14
    if kill is not None:
        kill()
        return
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        try:
            process.kill()
        except (OSError, ValueError, AttributeError):
            pass


MAX_RESTARTS = 2
"""How often a sweep replaces a pool whose worker died before it gives up."""


class WorkerDied(RuntimeError):
    """A local worker died (killed, out of memory, crashed) more than
    :data:`MAX_RESTARTS` times; ``str()`` names how (its exit code or signal)."""


def _death(codes: list[int | None]) -> str:
    """How the workers of a broken pool ended, from their exit codes."""
    # the pool terminates the survivors (SIGTERM) once one died: look past them
    dead = sorted((c for c in codes if c not in (None, 0)), key=lambda c: c == -signal.SIGTERM)
    if not dead:
        return "a worker ended abruptly"
    code = dead[0]
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
        why = ", often the out-of-memory killer" if -code == signal.SIGKILL else ""
        return f"a worker was killed by {name}{why}"
    return f"a worker exited with code {code}"


def _workers(pool) -> list:
    """The worker processes a pool has started (its private table, which the pool's
    manager thread clears once a worker died: take them while they are there)."""
    return list((getattr(pool, "_processes", None) or {}).values())


EXIT_CODE_WAIT_S = 10.0
"""How long a broken pool's worker may take to be reaped before its death is unnamed."""


def _exit_codes(processes) -> list[int | None]:
    """The exit codes of a broken pool's workers (its survivors are being terminated).
    A killed process closes its sentinel pipe a moment before it can be reaped, and the
    pool's manager thread reaps the same processes: a ``waitpid`` that loses that race
    finds no child (ECHILD) and reads as "still running" until the winner stores the code
    on the shared handle, so look again until a code shows or the wait runs out."""
    codes = []
    for process in processes:
        deadline = time.monotonic() + EXIT_CODE_WAIT_S
        code = None
        try:
            while True:
                process.join(timeout=0.2)
                code = process.exitcode
                if code is not None or time.monotonic() > deadline:
                    break
        except (OSError, ValueError, AssertionError):
            code = None
        codes.append(code)
    return codes


def iter_local(run_batch, batches, workers):
    """Rows of each batch (``run_batch(batch)``) as the workers finish them. A worker that
    dies (a kill, the out-of-memory killer) breaks its pool: the batches not finished run
    again on a new pool, at most :data:`MAX_RESTARTS` times, then :class:`WorkerDied`."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    context = multiprocessing.get_context("spawn")
    todo = dict(enumerate(batches))
    for restart in range(MAX_RESTARTS + 1):
        pool, futures, finished = None, {}, False
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            try:  # workers (and the pool's thread) start with SIGINT blocked; a Ctrl-C now waits below
                pool = ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=context,
                                           initializer=init_worker, initargs=(os.getpid(),))
                futures = {pool.submit(run_batch, batch): key for key, batch in todo.items()}
                started = _workers(pool)  # before a death clears the pool's own table
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            try:
                for future in as_completed(futures):
                    rows = future.result()
                    del todo[futures[future]]
                    yield rows
                finished = True
                return
            except BrokenProcessPool:
                death = _death(_exit_codes(dict.fromkeys(started + _workers(pool))))
                if restart == MAX_RESTARTS:
                    raise WorkerDied(f"{death} {MAX_RESTARTS + 1} times") from None
        finally:
            if pool is not None:
                if not finished:  # interrupted or failed: stop now, not after the running batches
                    for future in futures:
                        future.cancel()
                    _kill_workers(pool)
                pool.shutdown(wait=True, cancel_futures=True)


SCHEDULER_SCHEMES = ("tcp", "tls", "ws", "wss", "ucx")
"""Dask communication protocols a scheduler address may name (``distributed.comm``)."""

PROBE_TIMEOUT_S = 5.0
"""How long the TCP probe of a scheduler waits for its port to accept."""


def check_scheduler(address, probe: bool = True) -> str:
    """``address`` of a Dask scheduler, validated: ``[PROTOCOL://]HOST:PORT`` with a
    protocol of :data:`SCHEDULER_SCHEMES` (default ``tcp``) and a port 1-65535; with
    ``probe``, a TCP (or TLS, WebSocket) address must also accept a connection within
    :data:`PROBE_TIMEOUT_S`, so an unknown host or a closed port is an error at once, not
    after Dask's 30 s of retries. SpecError naming the address otherwise."""
    shape = "expected [PROTOCOL://]HOST:PORT such as tcp://scheduler:8786"
    if not isinstance(address, str) or not address.strip():
        raise SpecError(f"scheduler = {address!r}: {shape}")
    text = address.strip()
    scheme = text.split("://", 1)[0].lower() if "://" in text else "tcp"
    if scheme not in SCHEDULER_SCHEMES:
        raise SpecError(f"scheduler = {address!r}: protocol {scheme!r} is not one of {', '.join(SCHEDULER_SCHEMES)}")
    parts = urlsplit(text if "://" in text else f"tcp://{text}")
    try:
        port = parts.port
    except ValueError:
        raise SpecError(f"scheduler = {address!r}: the port must be an integer 1-65535") from None
    if not parts.hostname or port is None or parts.path not in ("", "/") or parts.query or parts.fragment:
        raise SpecError(f"scheduler = {address!r}: {shape}")
    if not 1 <= port <= 65535:
        raise SpecError(f"scheduler = {address!r}: the port must be an integer 1-65535")
    if probe and scheme != "ucx":  # UCX addresses need not be reachable over TCP
        try:
            socket.create_connection((parts.hostname, port), timeout=PROBE_TIMEOUT_S).close()
        except OSError as error:
            reason = error.strerror or (f"no answer within {PROBE_TIMEOUT_S:g} s" if isinstance(error, TimeoutError)
                                        else str(error))
            raise SpecError(f"scheduler = {address!r}: cannot connect to {parts.hostname} port {port}: "
                            f"{reason}") from None
    return text


CONNECT_TIMEOUT_S = 30.0
"""How long a sweep waits for a Dask scheduler's handshake (Dask's own connect timeout)."""


def _connect(client_class, scheduler: str):
    """A Dask client of ``scheduler``, or SpecError within :data:`CONNECT_TIMEOUT_S`.
    Dask's ``connect`` bounds the TCP connection but not the handshake read after it
    (distributed/comm/core.py ``connect``: ``await comm.read()``), so a server that
    accepts and never answers would hang the sweep: the client is made on a daemon thread
    and abandoned when it does not come back in time."""
    box: dict = {}

    def make() -> None:
        try:
            box["client"] = client_class(scheduler, timeout=CONNECT_TIMEOUT_S)
        except BaseException as error:  # noqa: BLE001 -- reported below, whatever it is
            box["error"] = error

    thread = threading.Thread(target=make, name="nest-dask-connect", daemon=True)
    thread.start()
    thread.join(CONNECT_TIMEOUT_S + 1.0)
    if thread.is_alive():
        detail = f"no handshake within {CONNECT_TIMEOUT_S:g} s"
    elif "error" in box:  # a timeout, or another protocol's bytes read as Dask's frames
        error = box["error"]
        detail = ("its reply is not Dask's protocol" if isinstance(error, MemoryError)
                  else f"{type(error).__name__}: {str(error)[:200]}")
    else:
        return box["client"]
    raise SpecError(f"scheduler = {scheduler!r}: no Dask scheduler answers there ({detail})")


def iter_dask(run_batch, batches, scheduler=None, dask_local=None):
    """Rows of each batch, computed on a Dask cluster (``scheduler``: an address;
    ``dask_local``: a local cluster of that many single-threaded worker processes)."""
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise SpecError("scheduler: Dask needs the 'distributed' package "
                        "(pip install 'nest-planner[dask]')") from None
    cluster = None
    if scheduler is None:
        cluster = LocalCluster(n_workers=int(dask_local), threads_per_worker=1, processes=True,
                               dashboard_address=None)
        client = Client(cluster)
    else:
        client = _connect(Client, scheduler)
    try:
        futures = [client.submit(run_batch, batch, pure=False) for batch in batches]
        for future in as_completed(futures):
            yield future.result()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
