"""The measuring stages of a kernel family (headroom.families.Family, docs/families.md), generic over
what the family computes: the portfolio (every admitted candidate timed on every invocation), the
cold compile (``prepare`` + first call in a fresh process) and the dispatch cost of fitted policies.

portfolio: invocations in chronological order; per distinct shape (built at its first invocation,
freed after its last): ``inputs`` in rotating sets (:func:`headroom.measure.timing.buffer_sets`,
each set seeded by (seed, run, shape_key, set)), and each supported candidate ``prepare``d once per
set and called once, untimed (a Triton kernel compiles at its first call). A candidate is prepared
per set because ``prepare`` may bind its inputs (the ``@triton.autotune`` adapter does): the timed
call is the set's own ``fn(inputs)``. Every invocation is timed, repeated shapes included, as the
attention portfolio times them: candidate order :func:`portfolio.candidate_order`, modes
:func:`portfolio.modes_for` (graph needs CUDA), :class:`timing.Harness` with ``portfolio.settings``.
A candidate whose ``supports`` is False on a shape has no row there.

Rows, one per (mode, invocation, timed candidate) (PORTFOLIO_COLUMNS): run, pid, device, mode,
invocation, shape_key, candidate, fused (False), backend ('family'), position (place in the
invocation's timing order), median_us mean_us p10_us p90_us std_us rel_std_pct, reps (samples),
rse_pct, stop_reason, cell_wall_s, timed_calls, calls_per_sample, buffer_sets, set_bytes (tensor
bytes of one input set), working_set_bytes, timing_method, host_us (eager on CUDA; NaN otherwise).
Samples: :func:`portfolio.samples_frame` (run, mode, invocation, candidate, rep, position,
latency_us, calls).

cold compile rows: the lifecycle contract's (headroom/core/contracts.py LIFECYCLE), one 'compile'
and one 'cache' row per candidate; :func:`lifecycle` adds the dispatch rows (lifecycle.dispatch_rows,
the policies fitted on the family's keying) and the switch rows (:func:`switch_rows`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import blake3
import numpy as np
import pandas as pd

from headroom.core import contracts
from headroom.families.contract import Candidate, FamilyError, call, check_candidates, check_shape, label
from headroom.families.expand import shape_key
from headroom.families.loading import SPEC, load
from headroom.measure import timing
from headroom.measure.portfolio import candidate_order, modes_for, samples_frame, stop_rules
from headroom.measure.portfolio import settings as portfolio_settings

PROJECT_ROOT = Path(__file__).resolve().parents[2]
_MODULE = "headroom.measure.family_runs"  # the cold-compile child: python -m _MODULE
PORTFOLIO_COLUMNS = (
    "run", "pid", "device", "mode", "invocation", "shape_key", "candidate", "fused", "backend", "position",
    "median_us", "mean_us", "p10_us", "p90_us", "std_us", "rel_std_pct", "reps", "rse_pct", "stop_reason",
    "cell_wall_s", "timed_calls", "calls_per_sample", "buffer_sets", "set_bytes", "working_set_bytes",
    "timing_method", "host_us",
)  # fmt: skip
_COMPILE_KINDS = (("compile", "s"), ("cache", "bytes"))
log = logging.getLogger(__name__)


def devices(device: str) -> tuple[str, str]:
    """(the harness's device, the family's): 'cuda' -> both 'cuda'; 'cpu' or 'interpret' ->
    ('interpret', 'cpu'), the Triton interpreter timed by the host clock."""
    if device == "cuda":
        return "cuda", "cuda"
    if device in ("cpu", "interpret"):
        return "interpret", "cpu"
    raise ValueError(f"device must be 'cuda', 'cpu' or 'interpret', got {device!r}")


def admitted(family: Any, ids: list[str]) -> list[Candidate]:
    """The family's candidates named by ``ids``, sorted by id (the order candidate_order permutes)."""
    if not ids:
        raise ValueError("no admitted candidates to time: every candidate failed correctness")
    known = {c.id: c for c in check_candidates(family, call(family, "candidates"))}
    unknown = sorted(set(ids) - set(known))
    if unknown:
        raise FamilyError(f"{label(family)}: no candidate {', '.join(unknown)} (it has {', '.join(known)})")
    return [known[i] for i in sorted(set(ids))]


def check_trace(family: Any, trace: pd.DataFrame) -> None:
    """ValueError naming what a family's invocations table lacks (headroom.families.expand)."""
    missing = [c for c in ("invocation", "shape_key", "shape") if c not in trace.columns]
    if missing:
        raise ValueError(f"trace lacks column(s) {missing} of a family's invocations")
    if trace.empty:
        raise ValueError("trace has no invocations")
    if "family" in trace.columns and set(trace["family"]) != {family.name}:
        raise ValueError(f"trace holds family {sorted(set(trace['family']))}, not {family.name!r}")
    if trace["invocation"].duplicated().any():
        raise ValueError("trace repeats an invocation number")


def set_seed(seed: int, run: int, shape_key: str, index: int) -> int:
    """The seed of input set ``index`` of a shape in run ``run`` (BLAKE3: stable across processes)."""
    digest = blake3.blake3(f"{seed}|{run}|{shape_key}|{index}".encode()).digest(length=8)
    return int.from_bytes(digest, "little") & (2**63 - 1)


def tensor_bytes(x: Any, depth: int = 0) -> int:
    """Bytes of the tensors in an input set: a tensor, or dicts, lists, tuples, objects holding them
    (four levels down at most)."""
    if hasattr(x, "nbytes") and hasattr(x, "dtype"):  # a torch tensor or a numpy array
        return int(x.nbytes)
    if depth >= 4:
        return 0
    if isinstance(x, Mapping):
        items = list(x.values())
    elif isinstance(x, list | tuple):
        items = list(x)
    else:
        items = list(vars(x).values()) if hasattr(x, "__dict__") else []
    return sum(tensor_bytes(v, depth + 1) for v in items)


def prepared(family: Any, cand: Candidate, shape: dict, key: str, inputs_: Any) -> Callable:
    """``family.prepare(cand, shape, inputs)``, checked callable; FamilyError naming both otherwise."""
    who = f"{label(family)}: prepare({cand.id!r}, {key})"
    try:
        fn = family.prepare(cand, shape, inputs_)
    except Exception as exc:
        raise FamilyError(f"{who} raised {type(exc).__name__}: {str(exc)[:300]}") from exc
    if not callable(fn):
        raise FamilyError(f"{who} must return fn(inputs), got {fn!r:.80}")
    return fn


def supported(family: Any, cand: Candidate, shape: dict) -> bool:
    found = call(family, "supports", cand, shape)
    if not isinstance(found, bool):
        raise FamilyError(f"{label(family)}: supports() must return True or False, got {found!r}")
    return found


def _call(fn: Callable, inputs_: Any) -> Any:
    """What the harness times: an input set's own prepared function on that set."""
    return fn(inputs_)


def _guard(family: Any, cand: Candidate, key: str, what: str, fn: Callable, *args: Any) -> Any:
    """fn(*args); an exception it raises becomes one FamilyError naming the candidate and shape."""
    try:
        return fn(*args)
    except FamilyError:
        raise
    except Exception as exc:
        raise FamilyError(
            f"{label(family)}: candidate {cand.id!r} on {key} ({what}) raised {type(exc).__name__}: "
            f"{str(exc)[:300]}"
        ) from exc


# -- portfolio -------------------------------------------------------------------------------------


def shape_calls(
    family: Any, cands: list[Candidate], key: str, shape_json: str, *, cfg: dict, seed: int, run: int,
    device: str, l2: int,
) -> tuple[dict[str, list[tuple]], int]:  # fmt: skip
    """One shape's timing set-up: {candidate id: [(fn, inputs) per rotating input set]} for every
    candidate that supports the shape, each prepared per set and called once, untimed; and the
    tensor bytes of one input set."""
    fdev = devices(device)[1]
    shape = check_shape(family, json.loads(shape_json), f"trace shape {key}")

    def make(i: int) -> Any:
        return call(family, "inputs", shape, seed=set_seed(seed, run, key, i), device=fdev)

    sets = [make(0)]
    nbytes = tensor_bytes(sets[0])
    n = timing.buffer_sets(
        max(nbytes, 1), l2, working_set_l2=cfg["working_set_l2"], max_sets=cfg["max_buffer_sets"]
    )
    sets += [make(i) for i in range(1, n)]
    calls = {}
    for cand in cands:
        if supported(family, cand, shape):
            calls[cand.id] = [(prepared(family, cand, shape, key, x), x) for x in sets]
            _guard(family, cand, key, "first call", _call, *calls[cand.id][0])
    return calls, nbytes


def time_invocation(
    harness: timing.Harness, family: Any, cands: list[Candidate], inv: Any, index: int,
    calls: dict[str, list[tuple]], *, modes: tuple[str, ...], seed: int, run: int,
) -> list[tuple]:  # fmt: skip
    """(mode, invocation, candidate id, position, Measurement) of every mode x supported candidate on
    the ``index``-th invocation, candidates in its seeded order (portfolio.candidate_order)."""
    order = candidate_order(len(cands), seed=seed, run=run, index=index)
    timed = [cands[i] for i in order if cands[i].id in calls]
    cells = []
    for mode in modes:
        for position, cand in enumerate(timed):
            m = _guard(family, cand, inv.shape_key, mode, harness.time, mode, _call, calls[cand.id])
            cells.append((mode, int(inv.invocation), cand.id, position, m))
    return cells


def _row(facts: dict, key: str, nbytes: int, cell: tuple) -> dict[str, Any]:
    mode, invocation, cand, position, m = cell
    return {
        **facts, "mode": mode, "invocation": invocation, "shape_key": key, "candidate": cand, "fused": False,
        "backend": "family", "position": position, **timing.summarize(m.samples_us),
        "reps": int(m.samples_us.size), "rse_pct": m.rse_pct, "stop_reason": m.stop_reason,
        "cell_wall_s": m.wall_s, "timed_calls": m.timed_calls, "calls_per_sample": m.calls_per_sample,
        "buffer_sets": m.buffer_sets, "set_bytes": nbytes, "working_set_bytes": nbytes * m.buffer_sets,
        "timing_method": m.method, "host_us": m.host_us,
    }  # fmt: skip


def _bench(cfg: dict, device: str) -> tuple[timing.Harness, tuple[str, ...]]:
    """The harness of portfolio settings ``cfg`` and the modes it times (graph needs CUDA)."""
    harness = timing.Harness(
        device, warmup=cfg["warmup_reps"], reps=cfg["reps"], graph_calls=cfg["graph_calls"],
        flush_l2=cfg["flush_l2"], stop=stop_rules(cfg), work_us=cfg["work_us"],
    )  # fmt: skip
    modes = modes_for(cfg["mode"], device)
    if modes != (("eager", "graph") if cfg["mode"] == "both" else (cfg["mode"],)):
        log.warning(
            "portfolio.mode=%s needs CUDA for graph mode; timing eager only on %s", cfg["mode"], device
        )
    return harness, modes


def portfolio(
    family: Any, trace: pd.DataFrame, candidates: list[str], *, run: int, settings: dict | None,
    device: str, seed: int,
) -> tuple[pd.DataFrame, pd.DataFrame]:  # fmt: skip
    """Every admitted candidate timed on every invocation of a family's ``trace`` (module
    docstring): (rows, samples). ``settings``: the `portfolio:` section (portfolio.settings);
    ``seed`` seeds the candidate order and the inputs (the section's own `seed` is not read)."""
    if type(run) is not int or run < 1:
        raise ValueError(f"run must be a positive int, got {run!r}")
    cfg, (hdev, _) = portfolio_settings(settings), devices(device)
    check_trace(family, trace)
    cands = admitted(family, candidates)
    harness, modes = _bench(cfg, hdev)
    ordered = trace.sort_values("invocation", kind="mergesort").reset_index(drop=True)
    last = set(ordered.groupby("shape_key").tail(1).index)  # a shape's set-up is freed after its last call
    facts, l2 = {"run": run, "pid": os.getpid(), "device": hdev}, timing.l2_bytes()
    live: dict[str, tuple] = {}
    rows, parts = [], []
    for index, inv in enumerate(ordered.itertuples(index=False)):
        if inv.shape_key not in live:
            live[inv.shape_key] = shape_calls(family, cands, inv.shape_key, inv.shape, cfg=cfg, seed=seed,
                                              run=run, device=hdev, l2=l2)  # fmt: skip
        calls, nbytes = live[inv.shape_key]
        for cell in time_invocation(
            harness, family, cands, inv, index, calls, modes=modes, seed=seed, run=run
        ):
            rows.append(_row(facts, inv.shape_key, nbytes, cell))
            parts.append((*cell[:4], cell[4].samples_us, cell[4].calls_per_sample))
        if index in last:
            del live[inv.shape_key]
    if not rows:
        raise ValueError(f"{label(family)}: no admitted candidate supports any shape of the trace")
    return pd.DataFrame(rows, columns=list(PORTFOLIO_COLUMNS)), samples_frame(run, parts)


# -- cold compile ----------------------------------------------------------------------------------


def lifecycle_row(kind: str, **fields: Any) -> dict[str, Any]:
    """A row of the lifecycle contract's columns, filled as lifecycle's own rows are; extra fields
    are kept."""
    row = dict.fromkeys(contracts.LIFECYCLE.names)
    row.update(kind=kind, candidate="", candidate_b="", policy="", mode="", invocation=-1, shape_key="",
               status="ok", reason="")  # fmt: skip
    row.update(fields)
    return row


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _toolchain_s(device: str, sync: Callable) -> float:
    """Triton's one-time work in a fresh process (CUDA init, its driver's helpers built into the
    empty cache), paid by an empty kernel's first launch and so kept out of every candidate's figure."""
    import torch

    from kernels import empty_kernel_launch

    anchor = torch.empty(16, device=device)
    sync()
    t0 = time.perf_counter()
    empty_kernel_launch(anchor)
    sync()
    return time.perf_counter() - t0


def _prepare_and_call_s(family: Any, cand: Candidate, shape: dict, key: str, x: Any, sync: Callable) -> float:
    sync()
    t0 = time.perf_counter()
    _guard(family, cand, key, "call", prepared(family, cand, shape, key, x), x)
    sync()
    return time.perf_counter() - t0


def compile_child(request: dict[str, Any]) -> dict[str, Any]:
    """In the fresh process (TRITON_CACHE_DIR empty): the family loaded by spec, the toolchain
    warmed (toolchain_s), then ``prepare`` + first call of the candidate on the first shape it
    supports (cold_s) and again (warm_s); cache_bytes: what the cold step added to the cache."""
    import torch

    dev = request["device"]
    family = load(request["family"], device=dev, root=request["root"]).family
    cand = admitted(family, [request["candidate"]])[0]
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    toolchain_s = _toolchain_s(dev, sync)
    shape = next((s for s in request["shapes"] if supported(family, cand, s)), None)
    if shape is None:
        raise FamilyError(f"{label(family)}: candidate {cand.id!r} supports none of the shapes given")
    key, x = shape_key(family, shape), call(family, "inputs", shape, seed=0, device=dev)
    cache = Path(os.environ["TRITON_CACHE_DIR"])
    before = _dir_bytes(cache)
    cold_s = _prepare_and_call_s(family, cand, shape, key, x, sync)
    added = _dir_bytes(cache) - before
    warm_s = _prepare_and_call_s(family, cand, shape, key, x, sync)
    return {"toolchain_s": toolchain_s, "cold_s": cold_s, "warm_s": warm_s, "cache_bytes": added,
            "shape_key": key, "pid": os.getpid()}  # fmt: skip


def spawned(request: dict[str, Any], timeout_s: int) -> dict[str, Any]:
    """compile_child(request) in a freshly started interpreter whose TRITON_CACHE_DIR is a new empty
    directory (TRITON_INTERPRET=1 unless on CUDA); {"error": ...} when it fails or times out."""
    with tempfile.TemporaryDirectory(prefix="headroom-triton-cold-") as cache:
        env = {**os.environ, "TRITON_CACHE_DIR": cache, "TRITON_INTERPRET": "1"}
        if request["device"] == "cuda":
            env.pop("TRITON_INTERPRET")
        paths = (str(PROJECT_ROOT), request["root"], env.get("PYTHONPATH", ""))
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        try:
            proc = subprocess.run(
                [sys.executable, "-m", _MODULE], input=json.dumps(request, default=_plain), env=env,
                capture_output=True, text=True, timeout=timeout_s, cwd=request["root"],
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return {"error": f"cold-compile child timed out after {timeout_s} s"}
    if proc.returncode != 0 or not proc.stdout.strip():
        return {"error": f"cold-compile child exited {proc.returncode}: {proc.stderr.strip()[-800:]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):  # a numpy scalar (shapes read from a DataFrame)
        return value.item()
    raise TypeError(f"{value!r:.80} ({type(value).__name__}) has no JSON form")


def compile_result_rows(candidate: str, res: dict[str, Any], device: str) -> list[dict[str, Any]]:
    """The compile row and the cache row of one candidate's cold compile (or two failed rows).
    compile_s: cold minus warm (prepare + first call), at least 0, as lifecycle's first minus second
    call; first_call_s: the cold seconds; warm_s (extra): the warm ones."""
    common = {"candidate": candidate, "compile_workers": 1, "device": device}
    if "error" in res:
        log.error("cold compile of %s failed: %s", candidate, res["error"])
        return [lifecycle_row(kind, value=math.nan, unit=unit, status="failed", reason=res["error"], **common)
                for kind, unit in _COMPILE_KINDS]  # fmt: skip
    compile_s = max(0.0, res["cold_s"] - res["warm_s"])
    detail = {"compile_s": compile_s, "cache_bytes": int(res["cache_bytes"]), "n": 1, **common}
    row = lifecycle_row(
        "compile", value=compile_s, unit="s", specializations=int(res["cache_bytes"] > 0),
        shape_key=res["shape_key"], specialization_s=f"{compile_s:.4f}", toolchain_s=res["toolchain_s"],
        first_call_s=res["cold_s"], warm_s=res["warm_s"], **detail,
    )  # fmt: skip
    return [row, lifecycle_row("cache", value=float(res["cache_bytes"]), unit="bytes", **detail)]


def cold_compile(
    family: Any, candidates: list[str], shapes: list[dict], *, device: str, timeout_s: int
) -> list[dict[str, Any]]:
    """Per candidate (sorted), its cold compile in a fresh process (:func:`compile_child`): lifecycle
    rows (:func:`compile_result_rows`). ``family``: its spec `package.module:ATTRIBUTE` (or a
    headroom.families.load result), which the child imports; ``shapes``: shape dicts, the first a
    candidate supports is compiled."""
    spec = getattr(family, "spec", family)
    if not isinstance(spec, str) or not SPEC.fullmatch(spec):
        raise ValueError(
            f"cold_compile needs the family's spec `package.module:ATTRIBUTE`, got {family!r:.80}"
        )
    if not candidates or not shapes:
        raise ValueError(f"cold_compile needs candidates and shapes, got {len(candidates)} and {len(shapes)}")
    hdev, fdev = devices(device)
    rows = []
    for cid in sorted(set(candidates)):
        request = {"family": spec, "candidate": cid, "shapes": shapes, "device": fdev, "root": os.getcwd()}
        rows += compile_result_rows(cid, spawned(request, timeout_s), hdev)
    return rows


# -- switching and the lifecycle stage -------------------------------------------------------------


def switch_plan(trace: pd.DataFrame, ids: list[str], cfg: dict) -> list[tuple[Any, str, str]]:
    """(invocation row, candidate A, candidate B): every pair of distinct candidates drawn as
    attention's switch pairs are drawn (lifecycle.switch_draw)."""
    from headroom.measure.lifecycle import switch_draw

    ids = sorted(set(ids))
    return switch_draw(trace, [(a, b) for i, a in enumerate(ids) for b in ids[i + 1 :]], cfg)


def switch_rows(family: Any, trace: pd.DataFrame, ids: list[str], cfg: dict, device: str) -> list[dict]:
    """Per planned (invocation, A, B) and mode: the median of A and B alternating minus the mean of
    their medians repeated (attention's switch figure, with the layer's work between calls)."""
    from headroom.measure.lifecycle import _alternating, _row, work_between

    hdev, fdev = devices(device)
    reps = cfg["switch_reps"] + cfg["switch_reps"] % 2  # even: as many A as B calls
    harness = timing.Harness(hdev, warmup=cfg["warmup_reps"], reps=reps,
                             graph_calls=cfg["graph_calls"] + cfg["graph_calls"] % 2)  # fmt: skip
    work_bytes = int(cfg["switch_work_l2"] * timing.l2_bytes())
    between = work_between(work_bytes, hdev)
    cands = {c.id: c for c in admitted(family, ids)}
    rows = []
    for inv, a, b in switch_plan(trace, ids, cfg):
        shape = check_shape(family, json.loads(inv.shape), f"trace shape {inv.shape_key}")
        if not (supported(family, cands[a], shape) and supported(family, cands[b], shape)):
            continue
        x = call(family, "inputs", shape, seed=set_seed(cfg["seed"], 0, inv.shape_key, 0), device=fdev)
        fa, fb = (between(prepared(family, cands[c], shape, inv.shape_key, x)) for c in (a, b))
        for mode in harness.modes:
            med = [float(np.median(harness.time(mode, f, [(x,)]).samples_us)) for f in (fa, fb)]
            alt = harness.time(mode, _alternating(fa, fb), [(x,)])
            med_alt, same = float(np.median(alt.samples_us)), 0.5 * sum(med)
            rows.append(_row("switch", candidate=a, candidate_b=b, mode=mode, invocation=int(inv.invocation),
                             shape_key=inv.shape_key, value=med_alt - same, unit="us", alternating_us=med_alt,
                             same_us=same, penalty_pct=100.0 * (med_alt - same) / same, work_bytes=work_bytes,
                             n=3 * alt.timed_calls, device=hdev))  # fmt: skip
    return rows


def lifecycle(family: Any, spec: str, trace: pd.DataFrame, ids: list[str], section: dict | None, *,
              device: str, policies: dict, keying: Any, log: logging.Logger = log) -> pd.DataFrame:  # fmt: skip
    """The lifecycle stage of a family: each admitted candidate's cold compile (:func:`cold_compile`,
    on the shapes of the trace in order), the dispatch cost of every policy fitted on the family's
    ``keying`` (lifecycle.dispatch_rows) and the switch penalty (:func:`switch_rows`). A family has
    no plan to build apart from ``prepare``, which the portfolio does untimed."""
    from headroom.measure import lifecycle as lc

    cfg = lc.settings(section)
    check_trace(family, trace)
    missing = sorted({"train_fraction", "clusters", "seed"} - set(policies))
    if missing:
        raise ValueError(
            f"policies: missing key(s) {missing}; the dispatch timing fits as the policies stage does"
        )
    shapes = [json.loads(s) for s in trace.sort_values("invocation")["shape"].drop_duplicates()]
    hdev = devices(device)[0]
    rows: list[dict] = []
    for name, step in (
        (
            "compile",
            lambda: cold_compile(spec, ids, shapes, device=device, timeout_s=cfg["compile_timeout_s"]),
        ),
        ("dispatch", lambda: lc.dispatch_rows(trace, sorted(ids), cfg, hdev, policies, keying)),
        ("switch", lambda: switch_rows(family, trace, ids, cfg, device)),
    ):
        t0 = time.perf_counter()
        rows.extend(step())
        log.info("lifecycle %s: %.2f s wall", name, time.perf_counter() - t0)
    return lc.frame(rows)


def _main() -> None:
    """``python -m headroom.measure.family_runs``: a request as JSON on stdin, compile_child's result
    (or {"error": ...}) as the one line on stdout; whatever the family prints goes to stderr."""
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    try:
        result = compile_child(json.loads(sys.stdin.read()))
    except Exception as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"[-800:]}
    out.write(json.dumps(result) + "\n")
    out.flush()


if __name__ == "__main__":
    _main()
