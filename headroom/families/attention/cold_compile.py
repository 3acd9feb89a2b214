"""The lifecycle stage's cold-compile child: one candidate compiled cold on every trace shape.

:func:`compile_child` runs in a fresh process whose TRITON_CACHE_DIR is a new empty directory. It
first initializes CUDA and launches the empty kernel (Triton's one-time toolchain work:
``toolchain_s``), then for every shape makes a first and a second call of the candidate; a first
call that added files to the cache compiled a specialization, of first-call minus second-call
seconds. Under TRITON_INTERPRET=1 it runs the same steps on the CPU, where nothing compiles (the
tests check the plumbing that way).

The fresh process is forked by a :class:`Server` that has imported this module -- torch, triton,
the kernels and the candidate runners, everything a child imported before its first timed step --
so that import is paid once per stage instead of once per candidate. None of these imports touches
CUDA (the server never initializes it; each child does, before ``toolchain_s`` starts), and Triton
reads TRITON_CACHE_DIR when it first compiles, after the child has set it. ``python -m
headroom.families.attention.cold_compile`` (spec as JSON on stdin, result as JSON on stdout) is the
freshly started variant the lifecycle stage falls back to.

The same server forks the correctness stage's compile-ahead children (:func:`warm`, task 'warm'):
each calls one candidate once per shape with the stage's own Triton cache directory, so the checks
find those kernels compiled. Nothing is measured there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd
import torch

import kernels
from headroom.core import contracts
from headroom.families.attention import inputs, portfolio
from headroom.families.attention.family import plain
from headroom.families.attention.runner import tables as candidate_tables


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def compile_child(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs inside the fresh process: cold-compile one candidate on every shape of ``spec``.
    (Under TRITON_INTERPRET=1 it runs the same steps on the CPU, where nothing compiles: the
    tests use that to check the plumbing.)"""
    device = "interpret" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
    tdev = "cuda" if device == "cuda" else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    cache = Path(os.environ["TRITON_CACHE_DIR"])
    anchor = torch.empty(16, device=tdev)
    sync()
    t0 = time.perf_counter()
    kernels.empty_kernel_launch(anchor)
    sync()
    toolchain_s = time.perf_counter() - t0
    start_bytes = _dir_bytes(cache)
    cand, shapes, (cos, sin) = _unpacked(spec, tdev)
    out = []
    for row in shapes.itertuples(index=False):
        (q, k, v) = inputs.input_sets(row, 1, device, seed=0)[0]
        lens = inputs.kv_lens_tensor(row, device)
        fn = portfolio.candidate_fn(cand, cos, sin, inputs.rotate_k(row), lens)
        before = _dir_bytes(cache)
        t0 = time.perf_counter()
        fn(q, k, v)
        sync()
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        fn(q, k, v)
        sync()
        second = time.perf_counter() - t0
        out.append(
            {
                "shape_key": row.shape_key,
                "first_s": first,
                "second_s": second,
                "new_bytes": _dir_bytes(cache) - before,
            }
        )
    return {
        "toolchain_s": toolchain_s,
        "cache_bytes": _dir_bytes(cache) - start_bytes,
        "shapes": out,
        "pid": os.getpid(),
    }


def _unpacked(spec: dict[str, Any], tdev: str) -> tuple[pd.Series, pd.DataFrame, tuple]:
    """A child's candidate row, its shapes and the RoPE tables they need, from its ``spec``."""
    shapes = pd.DataFrame(spec["shapes"])
    tables = candidate_tables(
        int(shapes["kv_len"].max()),
        int(shapes["head_dim"].iloc[0]),
        str(shapes["dtype"].iloc[0]),
        spec["rope_base"],
        tdev,
    )
    return pd.Series(spec["candidate"]), shapes, tables


def warm_child(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs inside a forked child that shares the stage's caches (:func:`warm`): one call of the
    candidate on every shape of ``spec``, so that whatever it compiles lands in the caches; a shape
    it cannot run is noted and the others still run (the stage's own call then fails it, named)."""
    device = "interpret" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    cand, shapes, (cos, sin) = _unpacked(spec, "cuda" if device == "cuda" else "cpu")
    failed = []
    for row in shapes.itertuples(index=False):
        try:
            (q, k, v) = inputs.input_sets(row, 1, device, seed=0)[0]
            lens = inputs.kv_lens_tensor(row, device)
            portfolio.candidate_fn(cand, cos, sin, inputs.rotate_k(row), lens)(q, k, v)
            sync()
        except Exception as exc:  # the stage's own check of this shape records what it is
            failed.append(f"{row.shape_key}: {type(exc).__name__}")
    return {"shapes": len(shapes), "failed": failed, "pid": os.getpid()}


def warm(
    shapes: list[dict],
    cands: list,
    rope_base: float,
    *,
    workers: int,
    timeout_s: float,
    log,
    interpret: bool = False,
) -> dict[str, Any]:
    """Compile ``cands`` (rows with the candidate columns) on ``shapes`` in up to ``workers`` forked
    children side by side, each calling its candidate once per shape with this process's Triton and
    Inductor cache directories, so that the stage's own first calls load what they compiled
    rather than compile it one candidate at a time. Nothing the stage measures changes: the
    correctness gate times nothing, and the lifecycle's cold compile uses fresh directories of its
    own. Returns {candidate: child result}; a failed child is logged and its candidate compiles in
    the stage as it would have. ``interpret``: the children run the Triton interpreter (the
    tests' plumbing check on a CPU: nothing compiles)."""
    from headroom.measure.portfolio import triton_cache_dir

    cache, t0 = triton_cache_dir(), time.perf_counter()
    root = Path(__file__).resolve().parents[3]
    with (
        Server(interpret=interpret, project_root=root) as server,
        tempfile.TemporaryDirectory(prefix="headroom-warm-") as results,
        ThreadPoolExecutor(max_workers=max(1, min(workers, len(cands)))) as pool,
    ):

        def one(item: tuple[int, Any]) -> dict[str, Any]:
            i, cand = item
            out = str(Path(results) / f"{i}.json")
            return server.compile(
                spec(cand, shapes, rope_base), cache, timeout_s=timeout_s, task="warm", out=out
            )

        done = dict(zip([c.candidate for c in cands], pool.map(one, enumerate(cands)), strict=True))
    for name, res in done.items():
        if "error" in res:
            log.warning(
                "compile ahead of %s failed (%s): it compiles in the stage", name, res["error"][-300:]
            )
        elif res["failed"]:
            log.info(
                "compile ahead of %s: %d shape(s) did not run (%s)",
                name,
                len(res["failed"]),
                res["failed"][0],
            )
    log.info(
        "compiled %d candidate(s) ahead on %d shapes in %d children side by side: %.1f s wall",
        len(cands),
        len(shapes),
        min(workers, len(cands)),
        time.perf_counter() - t0,
    )
    return done


def spec(cand: Any, shapes: list[dict], rope_base: float) -> dict[str, Any]:
    """What a child needs to run one candidate (a row with the candidate columns) on ``shapes``."""
    return {"candidate": plain(cand._asdict()), "shapes": shapes, "rope_base": rope_base}


def trace_shapes(trace: pd.DataFrame) -> list[dict]:
    """Each distinct shape of ``trace`` once, as its first invocation has it (the trace columns, as
    JSON scalars): the shapes a child runs its candidate on."""
    first = trace.sort_values("invocation", kind="mergesort").drop_duplicates("shape_key")
    return [plain(row) for row in first[list(contracts.TRACE_COLUMNS)].to_dict("records")]


class Server:
    """A process that has imported this module once and forks one child per compile request
    (``python -m headroom.families.attention.cold_compile --serve``): the child sets TRITON_CACHE_DIR, runs
    :func:`compile_child` and writes its result as JSON to a file the request names. Requests from
    several threads are serialized on the pipe; the children run side by side. Use as a context
    manager; ``interpret`` starts it with TRITON_INTERPRET=1 (the kernels are built interpreted or compiled when first imported)."""

    def __init__(self, *, interpret: bool, project_root: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        if interpret:
            env["TRITON_INTERPRET"] = "1"
        env["PYTHONPATH"] = os.pathsep.join([str(project_root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", __name__, "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=project_root,
            text=True,
        )
        self._lock = threading.Lock()
        self.interpret = interpret

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def compile(
        self,
        spec: dict[str, Any],
        cache: str,
        *,
        timeout_s: float,
        task: str = "compile",
        out: str | None = None,
    ) -> dict[str, Any]:
        """compile_child(spec) (``task`` 'warm': warm_child) in a child forked by the server,
        TRITON_CACHE_DIR = ``cache``, its result written to ``out`` (default: beside ``cache``);
        {"error": ...} when it fails, dies or outlives ``timeout_s`` (then it is killed)."""
        if task not in TASKS:
            raise ValueError(f"task must be one of {sorted(TASKS)}, got {task!r}")
        out = Path(out) if out is not None else Path(cache).with_name(Path(cache).name + ".result.json")
        request = {"spec": spec, "cache": cache, "out": str(out), "task": task}
        with self._lock:
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        if not line.strip():
            return {"error": f"the cold-compile server exited ({self._proc.poll()}) before forking a child"}
        pid, deadline = int(line), time.monotonic() + timeout_s
        while not out.exists():
            if not _alive(pid):
                time.sleep(0.05)  # the result's rename may land just after the exit
                if not out.exists():
                    return {"error": f"cold-compile child {pid} exited before writing a result"}
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                return {"error": f"cold-compile child timed out after {timeout_s} s", "timed_out": True}
            time.sleep(0.02)
        result = json.loads(out.read_text())
        out.unlink()
        return result


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def serve() -> None:
    """The server's loop: one JSON request a line on stdin, the forked child's pid a line back."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        print(pid, flush=True)


def _child(request: dict[str, Any]) -> None:
    """In the forked child: never returns. Its stdout is the server's pipe: pointed at stderr."""
    os.dup2(2, 1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # its own children (torch.compile's) are waited for
    try:
        os.environ["TRITON_CACHE_DIR"] = request["cache"]
        result = TASKS[request["task"]](request["spec"])
    except BaseException as exc:  # the parent records it as a failed compile row
        result = {"error": f"{type(exc).__name__}: {exc}"[-800:]}
    tmp = request["out"] + ".tmp"
    Path(tmp).write_text(json.dumps(result))
    os.replace(tmp, request["out"])
    os._exit(0)


#: what a forked child runs: a cold compile measured (the lifecycle) or a warm-up of shared caches
TASKS = {"compile": compile_child, "warm": warm_child}


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        print(json.dumps(compile_child(json.loads(sys.stdin.read()))))
