"""`headroom plan`: what each study will cost on the GPU, before it runs.

A linear cost model of the stage wall times (``benchmarks/*.tsv``) of the recorded references
(``data/reference/<gpu>/*``), fitted twice: on attention's references, and on the kernel families'
(headroom.families; their stages are one code, headroom/measure/family_runs.py). A family study is
planned on the families' model (on attention's when no family is recorded: :meth:`Model.of`). Each
stage with the terms that drive it:

- fixed stages (environment, calibrate, steps, trace, candidates, graph_sweep and the analysis
  stages): their mean over the references that ran them (steps: a family's only);
- correctness: a + b * candidates + c * candidates * shapes + d * long shapes (one check per
  candidate and distinct shape, one JIT compile per candidate's kernels; a long shape is one whose
  float64 reference runs chunked (headroom.families.attention.job_plan.long_shapes), computed once
  per shape since the gate draws a shape's inputs and answer once: azure-conv checked its 124
  shapes, 89 long, in 69 s, where each check computing its own answer took 271 s for 94; a family
  has none);
- lifecycle: a + b * candidates + c * candidates * shapes (a cold-compile child per candidate, a plan
  build per generation-2 candidate and shape);
- a portfolio run: start + cells * (overhead + timed), cells = modes * invocations * candidates.
  ``start`` (process start: the benchmark's wall time minus the run's own ``run_wall_s``; a family's
  run records none: its time outside its cells, which holds each shape's input sets, prepares and
  first calls) and the ``overhead`` (inputs, graph capture, warm-up, host time between events: the
  run's inner time minus its samples' timed time; per cell, plus per eager call once references
  differ in eager calls per cell, :func:`_overhead`) come from the references; ``timed`` is the
  study's sampler replayed on the recorded samples of the closest reference (its family, trace
  source, eager timing method: :func:`closest`; the same loop the harness runs:
  :func:`headroom.measure.timing.sample_loop`) for the samples a cell takes, times calls per sample,
  times a call's time: per mode a + b * megabytes a call moves (:func:`call_bytes`: attention's q/k/v,
  a family's own ``cost()`` bytes), fitted on every recorded row, at the study's mean.

Coefficients are non-negative least squares (scipy.optimize.nnls) over the references.
``held_out_line`` plans each reference by the model fitted on the others (issue 36's target: 15%).
What the references allow (``plan --validate``): each MoE study held out within 5% in total, its
runs within 7% and lifecycle within 6%; its correctness (13-19 s for the same checks) is not within
15%; nor is rmsnorm held out, the one other family recorded (its correctness: 36 s for 212 checks
where MoE's 742 took 13-19 s, -87%; its runs +49%; its total within 1% by their sum). Attention's
two references, each predicted from the other alone, are within 15% in total (+1% and -9%).
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from headroom.core import artifacts, integrity
from headroom.core.contracts import ATTENTION, family_of
from headroom.families.attention import job_plan
from headroom.measure import timing

PROJECT_ROOT = Path(__file__).resolve().parents[2]
REFERENCE_ROOT = PROJECT_ROOT / "data" / "reference"
SETUP_STAGES = ("environment", "calibrate", "steps", "trace", "candidates")
ANALYSIS_STAGES = ("policies", "decision", "roofline", "report", "catalog")
FIXED_STAGES = (*SETUP_STAGES, "graph_sweep", *ANALYSIS_STAGES)
GPU_STAGES = frozenset({"environment", "calibrate", "correctness", "lifecycle", "graph_sweep", "portfolio"})
_LINEAR = ("correctness", "lifecycle")
# (reference, stage) times no term of the model explains, left out of that stage's fit (they would
# pull every other reference's); none since correctness has its long-shape term.
UNEXPLAINED: frozenset[tuple[str, str]] = frozenset()
# References outside the model's range, not fitted on: their terms would pull every other reference's.
# mooncake-conv-flashinfer-3x30: contexts to 122k tokens and caches to 3.3e9 elements, whose input
# builds, float64 references and calls (median ~1 ms, against 42-93 us) no per-cell, per-shape or
# per-megabyte term fitted on the short-context references sees. A plan of a study like it is short
# (497 s planned; its GPU jobs took 808 s: data/reference/h200/mooncake-conv-flashinfer-3x30/benchmarks;
# the first recording's, docs/history/mooncake-conv.md, 889 s against 478 s planned).
OUT_OF_RANGE = frozenset({"mooncake-conv-flashinfer-3x30"})


def bench_s(path: Path) -> float:
    """Wall seconds of one Snakemake benchmark file (its first row's `s`)."""
    return float(pd.read_csv(path, sep="\t")["s"].iloc[0])


@dataclass
class Reference:
    """One recorded study: its stage times and the sizes that drive them."""

    name: str
    path: Path
    stage_s: dict[str, float]
    run_s: list[float]
    invocations: int
    shapes: int
    long_shapes: int  # shapes whose float64 reference runs chunked (long_shapes)
    candidates: int
    modes: int
    source: str
    generation: int
    mean_call_bytes: float
    start_s: float
    overheads: list[tuple[int, int, float]]  # per run: cells, eager calls, seconds beyond the samples
    samples_per_cell: dict[str, float]  # per mode, as recorded (run 1)
    calls_per_sample: dict[str, float]  # per mode, mean (work-sized graphs vary by invocation)
    device: str  # where it was measured (its environment's device)
    eager_method: str = ""  # how its eager cells were timed (timing_method: spin-events, cuda_events)
    family: str = ATTENTION  # the kernel family it measured (its trace's)

    @property
    def cells(self) -> int:
        return self.modes * self.invocations * self.candidates

    def samples(self) -> pd.DataFrame:
        return artifacts.read(self.path / "portfolio" / "run-1-samples.parquet")

    def rows(self) -> pd.DataFrame:
        """Run 1's cells, with ``call_bytes``: what the per-call model scales with (call_bytes)."""
        rows = artifacts.read(self.path / "portfolio" / "run-1.parquet")
        return rows.assign(call_bytes=call_bytes(rows, artifacts.read(self.path / "trace.parquet")))


def call_bytes(rows: pd.DataFrame, trace: pd.DataFrame) -> np.ndarray:
    """The bytes one call of each cell moves: attention's input set (q/k/v: ``set_bytes``); a kernel
    family's own ``cost()`` bytes of the invocation (its trace's ``cost_bytes``), as its study is
    planned (an input set of a family also holds weights and buffers a call need not read)."""
    if "cost_bytes" not in trace:
        return rows["set_bytes"].to_numpy(dtype=np.float64)
    return rows["invocation"].map(trace.set_index("invocation")["cost_bytes"]).to_numpy(dtype=np.float64)


def read_reference(path: Path) -> Reference:
    """A recorded study folder (benchmarks/, trace, candidates, portfolio) as a Reference."""
    bench = path / "benchmarks"
    stage_s = {p.stem: bench_s(p) for p in sorted(bench.glob("*.tsv"))}
    run_paths = sorted((bench / "portfolio").glob("run-*.tsv"))
    if not run_paths or "correctness" not in stage_s or "lifecycle" not in stage_s:
        raise ValueError(f"{path}: no benchmarks/portfolio/run-*.tsv, correctness.tsv or lifecycle.tsv")
    trace = artifacts.read(path / "trace.parquet")
    cands = artifacts.read(path / "candidates.parquet")
    runs = [artifacts.read(path / "portfolio" / f"{p.stem}.parquet") for p in run_paths]
    run_s = [bench_s(p) for p in run_paths]
    starts, overheads = [], []
    for rows, wall in zip(runs, run_s, strict=True):
        # a family's run records no run_wall_s: its time outside the cells (process start, each
        # shape's input sets, prepares and first calls) is its start
        inner = float(rows["run_wall_s"].iloc[0] if "run_wall_s" in rows else rows["cell_wall_s"].sum())
        timed = float((rows["mean_us"] * rows["reps"] * rows["calls_per_sample"]).sum()) * 1e-6
        starts.append(wall - inner)
        eager_calls = int(rows.loc[rows["mode"] == "eager", "reps"].sum())
        overheads.append((len(rows), eager_calls, inner - timed))
    first = runs[0].assign(call_bytes=call_bytes(runs[0], trace))
    family = family_of(trace)
    source = _trace_source(path)
    env = path / "environment.parquet"
    device = str(artifacts.read(env)["device"].iloc[0]) if env.exists() else "cuda"
    return Reference(
        name=path.name,
        path=path,
        stage_s=stage_s,
        run_s=run_s,
        invocations=len(trace),
        shapes=int(trace["shape_key"].nunique()),
        long_shapes=job_plan.long_shapes(trace) if family == ATTENTION else 0,
        candidates=int(first["candidate"].nunique()),
        modes=int(first["mode"].nunique()),
        source=str(source),
        generation=int(cands["generation"].max()) if "generation" in cands else 1,
        mean_call_bytes=float(first.drop_duplicates("invocation")["call_bytes"].mean()),
        start_s=float(np.mean(starts)),
        overheads=overheads,
        samples_per_cell=first.groupby("mode")["reps"].mean().to_dict(),
        calls_per_sample=first.groupby("mode")["calls_per_sample"].mean().to_dict(),
        device=device,
        eager_method=_eager_method(first),
        family=family,
    )


def _trace_source(path: Path, root: Path = PROJECT_ROOT) -> str:
    """The request log a recorded study read ('synthetic': none): attention's trace records it; a
    kernel family's trace is built from the steps artifact, whose recorded input it is. A log
    recorded as a plain file that is now shipped gzipped beside its name, the recorded bytes once
    decompressed (integrity.gzipped_as: AzureLLMInferenceTrace_conv.csv -> .csv.gz), is named as
    shipped, the name a study's trace.source gives: the plan matches it (closest)."""
    prov = artifacts.read_provenance(path / "trace.parquet")
    inputs, extra = prov.get("inputs", {}), prov.get("extra", {})
    source = extra.get("source")
    if source is None and (path / "steps.parquet").exists():
        inputs, extra = artifacts.read_provenance(path / "steps.parquet").get("inputs", {}), {}
        source = next(iter(inputs), None)
    if not source:
        return "synthetic"
    recorded = inputs.get(source) or extra.get("source_blake3")
    log = root / str(source)
    if recorded and not log.exists() and integrity.gzipped_as(log, recorded):
        return f"{source}.gz"
    return str(source)


def _eager_method(rows: pd.DataFrame) -> str:
    eager = rows.loc[rows["mode"] == "eager", "timing_method"] if "timing_method" in rows else []
    return str(eager.iloc[0]) if len(eager) else ""


def references(root: Path = REFERENCE_ROOT) -> list[Reference]:
    """Every recorded study under root/<gpu>/<study> that has stage benchmarks, less ``OUT_OF_RANGE``:
    attention's and the kernel families' (``fit`` fits each kind on its own)."""
    found = [
        read_reference(p)
        for p in sorted(root.glob("*/*"))
        if (p / "benchmarks" / "portfolio").is_dir() and p.name not in OUT_OF_RANGE
    ]
    if not found:
        raise ValueError(f"no recorded study with benchmarks under {root}: nothing to fit a cost model on")
    return found


@dataclass
class Model:
    """Stage costs fitted on the references (module docstring)."""

    refs: list[Reference]
    fixed_s: dict[str, float]
    linear: dict[str, np.ndarray]  # stage -> coefficients of linear_terms
    start_s: float
    overhead_s: np.ndarray  # (seconds per cell, seconds per eager call) beyond the timed samples
    call_us: dict[str, np.ndarray]  # mode -> (us per call, us per input MB)
    dropped: dict[str, frozenset[str]] = field(default_factory=dict)  # reference -> never timed there
    families: Model | None = None  # the same fitted on the kernel families' references (None: none)

    @property
    def of_families(self) -> bool:
        return self.refs[0].family != ATTENTION

    def of(self, family: str) -> Model:
        """The model a study of ``family`` is planned on: a kernel family's is fitted on the kernel
        families' references (their stages are one code, headroom/measure/family_runs.py), when any."""
        return self.families if family != ATTENTION and self.families else self

    def call_time_us(self, mode: str, megabytes: float) -> float:
        return float(self.call_us[mode] @ np.array([1.0, megabytes]))

    def linear_s(self, stage: str, candidates: int, shapes: int, long: int) -> float:
        return float(self.linear[stage] @ linear_terms(stage, candidates, shapes, long))


def linear_terms(stage: str, candidates: int, shapes: int, long: int) -> np.ndarray:
    """The terms of a linear stage (module docstring): correctness also pays per long shape."""
    terms = [1.0, candidates, candidates * shapes]
    return np.array(terms + [long] if stage == "correctness" else terms, dtype=np.float64)


def fit(refs: list[Reference]) -> Model:
    """Attention's model on the attention references, with ``families``: the kernel families' model
    on theirs. With no attention reference, the families' model is the model."""
    kernel = [r for r in refs if r.family != ATTENTION]
    attention = [r for r in refs if r.family == ATTENTION]
    families = _fit(kernel) if kernel else None
    if families and not attention:
        return families
    return dataclasses.replace(_fit(attention), families=families)


def _fit(refs: list[Reference]) -> Model:
    from scipy.optimize import nnls

    timed = {s: [r.stage_s[s] for r in refs if s in r.stage_s] for s in FIXED_STAGES}
    fixed = {s: float(np.mean(v)) for s, v in timed.items() if v}
    linear = {}
    for stage in _LINEAR:
        fitted = [r for r in refs if (r.name, stage) not in UNEXPLAINED]
        x = np.array([linear_terms(stage, r.candidates, r.shapes, r.long_shapes) for r in fitted])
        linear[stage] = nnls(x, np.array([r.stage_s[stage] for r in fitted]))[0]
    dropped = {r.name: frozenset(_dropped(r)) for r in refs}
    start = float(np.mean([r.start_s for r in refs]))
    overhead = _overhead(np.array([o for r in refs for o in r.overheads], dtype=np.float64))
    rows = pd.concat([r.rows() for r in refs], ignore_index=True)
    call_us = {}
    for mode, grp in rows.groupby("mode", sort=True):
        design = np.column_stack([np.ones(len(grp)), grp["call_bytes"].to_numpy() / 1e6])
        call_us[mode] = nnls(design, grp["median_us"].to_numpy())[0]
    return Model(refs, fixed, linear, start, overhead, call_us, dropped)


def _overhead(runs: np.ndarray) -> np.ndarray:
    """(per cell, per eager call) seconds from the runs' (cells, eager calls, seconds) by NNLS. While
    every run took about as many eager calls per cell (the fixed sampler's references), the two are
    not separable: all of it is charged per cell (an upper bound for a sampler taking fewer calls)."""
    from scipy.optimize import nnls

    ratio = runs[:, 1] / runs[:, 0]
    if ratio.max() < 1.1 * ratio.min():
        return np.array([float(np.sum(runs[:, 2]) / np.sum(runs[:, 0])), 0.0])
    return nnls(runs[:, :2], runs[:, 2])[0]


def _dropped(ref: Reference) -> set[str]:
    """Candidates a reference built but never timed (correctness found them unsupported there)."""
    built = set(artifacts.read(ref.path / "candidates.parquet")["candidate"])
    return built - set(ref.rows()["candidate"].unique())


# -- a study ---------------------------------------------------------------------------------------


def closest(refs: list[Reference], source: str, generation: int, family: str = ATTENTION) -> Reference:
    """The reference whose family, then trace source, then eager timing method (today's
    :data:`headroom.measure.timing.EAGER_METHOD`: how many eager samples a cell takes depends on it),
    then kernel generation matches the study's best."""
    return min(
        refs,
        key=lambda r: (
            r.family != family,
            r.source != source,
            r.eager_method != timing.EAGER_METHOD,
            r.generation != generation,
            r.name,
        ),
    )


def simulated_cell(samples: pd.DataFrame, cfg: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """{mode: (mean samples per cell, mean timed seconds per cell)} of the study's sampler
    (portfolio settings ``cfg``) replayed on a reference run's recorded samples: each cell's
    samples in their recorded order, cycled when the sampler asks for more than were recorded."""
    from headroom.measure import portfolio

    rules, fixed = portfolio.stop_rules(cfg), fixed_samples(cfg)
    out = {}
    for mode, grp in samples.sort_values("rep", kind="mergesort").groupby("mode", sort=True):
        counts, timed = [], []
        for _, cell in grp.groupby(["invocation", "candidate"], sort=False):
            x, _, _ = replayed(cell, rules.get(mode), fixed[mode])
            counts.append(x.size)
            timed.append(float(x.sum()) * 1e-6)
        out[mode] = (float(np.mean(counts)), float(np.mean(timed)))
    return out


def fixed_samples(cfg: dict[str, Any]) -> dict[str, int]:
    """{mode: samples} a cell takes under the fixed sampler (portfolio settings ``cfg``)."""
    return {"eager": cfg["reps"], "graph": timing.graph_replays(cfg["reps"], cfg["graph_calls"])}


def replayed(cell: pd.DataFrame, rule: timing.StopRule | None, fixed: int) -> tuple[np.ndarray, str, float]:
    """The samples (in µs a sample: a call, or a replay) that ``rule`` (None: the fixed sampler,
    ``fixed`` samples) takes from one cell's recorded samples (latency_us, calls; in their recorded
    order), cycled when it asks for more than were recorded; its stop reason and rse_pct."""
    unit = cell["latency_us"].to_numpy() * cell["calls"].to_numpy()
    replay = _Replay(unit)
    x, reason, rse, _ = timing.sample_loop(rule, replay.take, fixed, replay.clock)
    return x, reason, rse


class _Replay:
    """Recorded samples replayed: ``take(k)`` hands out the next k (cycling), and ``clock`` (ns)
    advances by their time, as the device's clock would have."""

    def __init__(self, unit: np.ndarray) -> None:
        self.unit, self.done, self.ns = unit, 0, 0

    def take(self, k: int) -> np.ndarray:
        x = self.unit[(self.done + np.arange(k)) % self.unit.size]
        self.done += k
        self.ns += round(float(x.sum()) * 1e3)
        return x

    def clock(self) -> int:
        return self.ns


@dataclass
class JobPlan:
    """One study's jobs (stage, count, predicted seconds each), timed cells and the facts behind."""

    study: str
    jobs: list[tuple[str, int, float]]
    cells: int
    facts: dict[str, Any]

    @property
    def gpu_s(self) -> float:
        return sum(n * s for stage, n, s in self.jobs if stage in GPU_STAGES)

    @property
    def total_s(self) -> float:
        return sum(n * s for _, n, s in self.jobs)


def _stage_jobs(
    model: Model, candidates: int, shapes: tuple[int, int], runs: int, run_s: float, family: bool = False
) -> list:
    """shapes: (distinct, long); family: a kernel family's study, whose graph sweep writes its
    skipped rows and times nothing: on attention's model, a process like the candidates stage's.
    The steps stage is planned where the references ran it (a family study's)."""
    jobs = [(s, 1, model.fixed_s[s]) for s in SETUP_STAGES if s in model.fixed_s]
    jobs += [(s, 1, model.linear_s(s, candidates, *shapes)) for s in _LINEAR]
    sweep_s = model.fixed_s["candidates" if family and not model.of_families else "graph_sweep"]
    jobs += [("graph_sweep", 1, sweep_s), ("portfolio", runs, run_s)]
    return jobs + [(s, 1, model.fixed_s[s]) for s in ANALYSIS_STAGES if s in model.fixed_s]


def plan_study(name: str, study: dict[str, Any], model: Model) -> JobPlan:
    """The jobs, timed cells and predicted seconds of one resolved study (config.plan_studies)."""
    from headroom.measure import portfolio

    if study.get("replay"):
        jobs = [(s, 1, model.fixed_s[s]) for s in ANALYSIS_STAGES if s in model.fixed_s]
        return JobPlan(name, jobs, 0, {"replay": study["replay"]})
    if study.get("family"):
        trace, built, megabytes = _family_study(study)
        family = str(family_of(trace))
        model = model.of(family)
        kind = "kernel families'" if model.of_families else "attention's (none of a kernel family)"
        note = (f"family {family}: planned on {kind} references ({', '.join(r.name for r in model.refs)}), "
                "a call's time by the bytes its cost() says it moves")  # fmt: skip
    else:
        trace, built, megabytes, note = job_plan.study(study, PROJECT_ROOT)
        family = ATTENTION
    ref = closest(model.refs, str(study["trace"]["source"]), int(study["generation"]), family)
    # a backend unsupported on one trace's shapes (mooncake-conv's long contexts) may run on
    # another's: the closest reference's own drops, not every reference's
    admitted = [c for c in built if c not in model.dropped[ref.name]]
    cfg = portfolio.settings({k: v for k, v in study["portfolio"].items() if k != "runs"})
    modes = portfolio.modes_for(cfg["mode"], study["device"])
    per_mode = simulated_cell(ref.samples(), cfg)
    untimed = [m for m in modes if m not in per_mode or m not in model.call_us]
    if untimed:
        timed = sorted(set(per_mode) & set(model.call_us))
        raise ValueError(
            f"no reference timed {'/'.join(untimed)} mode ({ref.name}, the closest to study {name!r}, timed "
            f"{'/'.join(timed) or 'none'}; recorded on {ref.device}): plan a {study['device']} study on "
            f"references recorded in every mode it times (--references, default {REFERENCE_ROOT})"
        )
    calls = {"eager": 1, "graph": cfg["graph_calls"]}
    if cfg["work_us"] > 0:  # work-sized graphs: as many calls as hold work_us at the model's call time
        per_call = model.call_time_us("graph", megabytes)
        calls["graph"] = timing.sized_calls(cfg["work_us"], per_call, 1, cfg["graph_calls"])
    n_inv, n_cand = len(trace), len(admitted)
    samples = {m: per_mode[m][0] for m in modes}
    run_s = _run_s(model, n_inv * n_cand, samples, calls, megabytes)
    runs = int(study["portfolio"]["runs"])
    measured_on = sorted({r.device for r in model.refs})
    facts = {
        "device": study["device"],
        "device_why": study.get("device_why", ""),
        "measured_on": measured_on,
        "invocations": n_inv,
        "shapes": int(trace["shape_key"].nunique()),
        "candidates": n_cand,
        "modes": modes,
        "runs": runs,
        "sampler": cfg["sampler"],
        "samples_per_cell": samples,
        "reference": ref.name,
        "megabytes": megabytes,
        "call_us": {m: model.call_time_us(m, megabytes) for m in modes},
        "trace_note": note,
    }
    long = 0 if study.get("family") else job_plan.long_shapes(trace)  # a family's reference is its own
    jobs = _stage_jobs(model, n_cand, (facts["shapes"], long), runs, run_s, bool(study.get("family")))
    return JobPlan(name, jobs, runs * len(modes) * n_inv * n_cand, facts)


def _family_study(study: dict[str, Any]) -> tuple[pd.DataFrame, list[str], float]:
    """A family study's trace (the family imported, its calls over the engine's steps, sampled as
    the trace stage samples them), its candidates and the mean bytes one call moves by its own
    ``cost`` (MB: what the per-call model scales with, :func:`call_bytes`)."""
    from headroom.families import load, stages
    from headroom.families.study import candidates_table, family_trace
    from headroom.trace import step_table

    family = load(study["family"], device=study["device"], root=PROJECT_ROOT).family
    steps = step_table.build(study["trace"], study["partition"], base_dir=PROJECT_ROOT)
    trace = stages.cost_columns(family, family_trace(family, steps, study["trace"])[0])
    return trace, list(candidates_table(family)["candidate"]), float(trace["cost_bytes"].mean()) / 1e6


def _run_s(
    model: Model, pairs: int, samples: dict[str, float], calls: dict[str, int], megabytes: float
) -> float:
    """A portfolio run: start + per (invocation, candidate) pair and mode, the cell's overhead and
    its samples' time (eager calls also their host overhead)."""
    per_pair = 0.0
    for mode, n in samples.items():
        per_pair += model.overhead_s[0] + n * calls[mode] * model.call_time_us(mode, megabytes) * 1e-6
        per_pair += model.overhead_s[1] * n if mode == "eager" else 0.0
    return model.start_s + pairs * per_pair


def reference_plan(ref: Reference, model: Model) -> JobPlan:
    """The model's plan of a recorded study as it was run (its recorded samples per cell)."""
    model = model.of(ref.family)
    pairs = ref.invocations * ref.candidates
    run_s = _run_s(model, pairs, ref.samples_per_cell, ref.calls_per_sample, ref.mean_call_bytes / 1e6)
    jobs = _stage_jobs(
        model, ref.candidates, (ref.shapes, ref.long_shapes), len(ref.run_s), run_s, ref.family != ATTENTION
    )
    jobs = [job for job in jobs if job[0] in ref.stage_s or job[0] == "portfolio"]  # the stages it ran
    facts = {"measured_s": sum(ref.stage_s.values()) + sum(ref.run_s)}
    return JobPlan(ref.name, jobs, len(ref.run_s) * ref.cells, facts)


def held_out_line(ref: Reference, refs: list[Reference]) -> str:
    """The plan of a reference by the model fitted on the others: how the model predicts a study it
    was not fitted on (issue 36's target: within 15%)."""
    others = [r for r in refs if r is not ref]
    if not others:
        return "  held out: no other reference to fit on"
    model = fit(others).of(ref.family)
    plan = reference_plan(ref, model)
    measured = plan.facts["measured_s"]
    return (
        f"  held out (fitted on {', '.join(r.name for r in model.refs)}): predicted {plan.total_s:.0f} s, "
        f"{plan.total_s / measured - 1:+.0%} of the measured {measured:.0f} s"
    )


# -- text and the verb -----------------------------------------------------------------------------


def plan_text(plan: JobPlan) -> str:
    f = plan.facts
    if "replay" in f:
        head = f"study {plan.study}: replay of {f['replay']} (no GPU jobs)"
    elif "measured_s" in f:
        head = f"reference {plan.study}: measured {f['measured_s']:.0f} s"
    else:
        per = ", ".join(f"{m} {n:.1f}" for m, n in f["samples_per_cell"].items())
        why = f": {f['device_why']}" if f.get("device_why") else ""
        head = (
            f"study {plan.study} ({f['device']}{why}): {f['invocations']} invocations, {f['shapes']} shapes, "
            f"{f['candidates']} candidates, modes {'/'.join(f['modes'])}, {f['runs']} runs, sampler "
            f"{f['sampler']} (samples per cell: {per}, replayed on {f['reference']}'s samples; "
            f"{f['megabytes']:.0f} MB per input set: "
            + ", ".join(f"{m} {us:.0f} us" for m, us in f["call_us"].items())
            + " per call)"
        )
    lines = [head] + ([f"  {f['trace_note']}"] if f.get("trace_note") else [])
    if f.get("measured_on") and f["device"] not in f["measured_on"]:
        slower = ", far longer on the interpreter" if f["device"] == "interpret" else ""
        lines.append(
            f"  (predicted from references measured on {'/'.join(f['measured_on'])}; this study runs on "
            f"{f['device']}: expect another time{slower})"
        )
    lines.append(f"  {'job':<12} {'count':>5} {'gpu':>4} {'predicted_s':>12}")
    for stage, n, s in plan.jobs:
        each = f"{n} x {s:.1f}" if n > 1 else f"{s:.1f}"
        lines.append(f"  {stage:<12} {n:>5} {('yes' if stage in GPU_STAGES else 'no'):>4} {each:>12}")
    lines.append(
        f"  timed cells {plan.cells:,}; predicted {plan.gpu_s:.0f} s of GPU jobs, {plan.total_s:.0f} s in all"
    )
    return "\n".join(lines)


def add_parser(sub: Any) -> None:
    """The `plan` verb of `headroom` (headroom.core.cli)."""
    p = sub.add_parser(
        "plan",
        help="each study's jobs, timed cells and predicted GPU time (fitted on the recorded references)",
    )
    p.add_argument("studies", nargs="*", help="study names (default: --study, else config.yaml's studies)")
    p.add_argument("--references", default=str(REFERENCE_ROOT), help="recorded studies, <gpu>/<study>/")
    p.add_argument(
        "--device",
        choices=["auto", "cuda", "interpret"],
        default=None,
        help="the device to plan for (default: config's `device`, resolved as snakemake resolves it here: "
        "auto is cuda when a GPU is visible, else the interpreter with the smoke overlay)",
    )
    p.add_argument(
        "--validate",
        action="store_true",
        help="also the model's plan of each reference beside its measured time, and its plan by the model "
        "fitted on the other references",
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        metavar="S",
        help="the seconds a study may take (all its stages): say for each study whether it fits and by how "
        "much it does not; exit 1 when one does not",
    )
    p.set_defaults(func=cmd_plan)


def budget_line(plan: JobPlan, budget_s: float) -> tuple[bool, str]:
    """Whether a planned study fits budget_s seconds (all its stages), and the line that says so:
    by how much it is over and which job takes the most."""
    total = plan.total_s
    if total <= budget_s:
        return (
            True,
            f"  fits --budget-s {budget_s:g}: predicted {total:.0f} s, {budget_s - total:.0f} s to spare",
        )
    stage, n, s = max(plan.jobs, key=lambda job: job[1] * job[2])
    each = f"{n} x {s:.1f} s" if n > 1 else f"{s:.1f} s"
    return False, (
        f"  over --budget-s {budget_s:g}: predicted {total:.0f} s ({plan.gpu_s:.0f} s of GPU jobs), "
        f"{total - budget_s:.0f} s ({total / budget_s - 1:.0%}) over; the largest job is {stage} ({each})"
    )


def device_why(requested: str, device: str, given: bool) -> str:
    """Why the plan is of this device's study: the one snakemake runs here (`device: auto` resolved by
    headroom.core.config.resolve_device, as the pipeline resolves it), or the one asked for."""
    if device == "replay":
        return ""
    if given:
        return f"--device {requested}"
    if requested != "auto":
        return f"config device: {requested}"
    if device == "interpret":
        return "no GPU visible here: the interpreter's smoke study, as snakemake runs it here; --device cuda plans the GPU study"
    return "a GPU is visible here, as snakemake runs it here; --device interpret plans the interpreter's"


def cmd_plan(args: argparse.Namespace) -> int:
    from headroom.core import cli
    from headroom.core import config as hconfig
    from headroom.trace import source as htsource

    try:
        config = hconfig.load(PROJECT_ROOT / "config" / "config.yaml")
        names = args.studies or ([args.study] if getattr(args, "study", None) else config["studies"])
        refs = references(Path(args.references))
        model = fit(refs)
        requested = args.device or config["device"]
        studies = hconfig.plan_studies(
            {**config, "device": requested, "studies": list(names)}, check_source=htsource.check
        )
        for study in studies.values():
            study["device_why"] = device_why(requested, study["device"], given=args.device is not None)
        if args.budget_s is not None and not (np.isfinite(args.budget_s) and args.budget_s > 0):
            raise ValueError(f"--budget-s must be a number of seconds > 0, got {args.budget_s:g}")
        plans = [plan_study(name, study, model) for name, study in studies.items()]
        texts, fits = [], []
        for plan in plans:
            text = plan_text(plan)
            if args.budget_s is not None and "replay" not in plan.facts:
                ok, line = budget_line(plan, args.budget_s)
                text, fits = f"{text}\n{line}", [*fits, ok]
            texts.append(text)
        if args.validate:
            texts += [f"{plan_text(reference_plan(r, model))}\n{held_out_line(r, refs)}" for r in refs]
    except (ValueError, hconfig.ConfigError) as exc:
        raise cli.CliError(str(exc), cli.EXIT_USAGE) from None
    print("\n\n".join(texts))
    return 0 if all(fits) else cli.EXIT_ERROR
