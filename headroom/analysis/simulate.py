"""A simulator of portfolio runs with a known true surface, to validate the decision rule.

Noise model (log scale, per mode), estimated from the recorded study being decided (``estimate_noise``)
so that a kernel or harness change re-estimates it:

    log us[r, i, c] = log truth[i, c] + run[r] + block[r, i] + cand_run[r, c] + resid[r, i, c]

run: a run offset; block: an offset shared by every candidate of invocation i in run r, AR(1) along the
trace (drift and neighbouring-call correlation); cand_run: a candidate x run effect; resid: the rest
(which includes the within-run noise of each median). ``within_sd`` is what the within-run samples
imply for one median (std_us / sqrt(reps), relative), so ``between_over_within`` — the variance of the
candidate-specific run-to-run part over that — says how much a single run's samples understate it.

Truth targets: invocations are *not* redrawn; the trace is fixed and the truth of a figure is the
expected value, over the noise, of the fitted procedure's figure scored on the true surface
(``truth_scored``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from headroom.analysis import crossrun, decision, figures
from headroom.analysis.costs import LifecycleCosts
from headroom.analysis.crossrun import ModeData, Options


@dataclass(frozen=True)
class NoiseModel:
    mode: str
    run_sd: float
    block_sd: float
    block_ar: float
    cand_run_sd: float
    resid_sd: float
    within_sd: float

    def scaled(self, k: float) -> NoiseModel:
        return replace(
            self, run_sd=self.run_sd * k, block_sd=self.block_sd * k, cand_run_sd=self.cand_run_sd * k,
            resid_sd=self.resid_sd * k, within_sd=self.within_sd * k,
        )  # fmt: skip

    @property
    def between_over_within(self) -> float:
        return (self.cand_run_sd**2 + self.resid_sd**2) / max(self.within_sd**2, 1e-30)


def estimate_noise(md: ModeData) -> NoiseModel:
    """Variance components of log medians across the runs of one mode (method of moments)."""
    L = np.log(md.us)  # (R, N, C)
    R = L.shape[0]
    mu = L.mean(axis=0)
    run = L.mean(axis=(1, 2)) - L.mean()
    E = L - mu - run[:, None, None]
    block = E.mean(axis=2)  # (R, N)
    cand_run = (E - block[:, :, None]).mean(axis=1)  # (R, C)
    resid = E - block[:, :, None] - cand_run[:, None, :]
    c = R / max(R - 1, 1)  # deviations from a mean over R runs understate the variance by (R-1)/R
    b = block - block.mean(axis=1, keepdims=True)
    ar = float(np.sum(b[:, 1:] * b[:, :-1]) / max(np.sum(b * b), 1e-30))
    rel_within = np.sqrt(md.sem2) / md.us
    return NoiseModel(
        md.mode, float(np.std(run) * np.sqrt(c)), float(np.std(block) * np.sqrt(c)), float(np.clip(ar, 0, 0.95)),
        float(np.std(cand_run) * np.sqrt(c)), float(np.std(resid) * np.sqrt(c)), float(np.median(rel_within)),
    )  # fmt: skip


def draw(truth: np.ndarray, model: NoiseModel, runs: int, rng: np.random.Generator) -> np.ndarray:
    """(runs, N, C) simulated medians around ``truth`` (N, C)."""
    n, c = truth.shape
    block = np.empty((runs, n))
    block[:, 0] = rng.standard_normal(runs)
    eps = rng.standard_normal((runs, n))
    phi = model.block_ar
    for i in range(1, n):  # AR(1) with unit marginal variance
        block[:, i] = phi * block[:, i - 1] + np.sqrt(1 - phi**2) * eps[:, i]
    log = (
        np.log(truth)[None]
        + model.run_sd * rng.standard_normal((runs, 1, 1))
        + model.block_sd * block[:, :, None]
        + model.cand_run_sd * rng.standard_normal((runs, 1, c))
        + model.resid_sd * rng.standard_normal((runs, n, c))
    )
    return np.exp(log)


def with_us(md: ModeData, us: np.ndarray) -> ModeData:
    runs = list(range(1, us.shape[0] + 1))
    return replace(md, us=us, runs=runs, sem2=np.zeros_like(us))


def one_seed(md: ModeData, truth, model, runs, rng, opts: Options, costs: LifecycleCosts, thresholds) -> dict:
    """Simulate, decide this mode alone, and score the same fits on the truth: one seed's outcome."""
    from headroom.analysis.policies import fit_mode

    sim = with_us(md, draw(truth, model, runs, rng))
    n_train, fits = fit_mode(sim, costs, opts, 0.5, 0)
    rows = pd.DataFrame(figures.mode_figures(sim, fits, n_train, opts, 0))
    d = decision.decide(
        rows, None, pd.DataFrame([{"device": "cuda"}]), confidence=opts.confidence, **thresholds
    )
    true_md = with_us(md, np.broadcast_to(truth, sim.us.shape).copy())
    truth_rows = pd.DataFrame(
        figures.mode_figures(true_md, fits, n_train, replace(opts, bootstrap_resamples=1), 0)
    )
    out = {"verdict": d["verdict"].iloc[0]}
    for name in ("gap_to_oracle", "policy_gain", "fusion_speedup"):
        r = d[d["figure"] == name]
        if len(r):
            out.update({f"{name}": r["estimate"].iloc[0], f"{name}_lo": r["ci_low"].iloc[0],
                        f"{name}_hi": r["ci_high"].iloc[0], f"{name}_state": r["state"].iloc[0],
                        f"{name}_true": float(truth_rows.loc[truth_rows["figure"] == name, "estimate"].iloc[0])})  # fmt: skip
    return out


def monte_carlo(md, truth, model, *, runs=3, seeds=200, opts=None, costs=None, thresholds=None, seed=0):
    """One row per seed (see ``one_seed``); coverage needs the truth target, the mean of *_true."""
    opts = opts or Options(bootstrap_resamples=200, random_draws=20)
    costs = costs or LifecycleCosts()
    thresholds = thresholds or {}
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        [one_seed(md, truth, model, runs, rng, opts, costs, thresholds) for _ in range(seeds)]
    )


def coverage(mc: pd.DataFrame, figure: str) -> float:
    target = mc[f"{figure}_true"].mean()
    return float(((mc[f"{figure}_lo"] <= target) & (target <= mc[f"{figure}_hi"])).mean())


# ----------------------------------------------------------------------------------------------
# True surfaces
# ----------------------------------------------------------------------------------------------


def recorded_truth(md: ModeData) -> np.ndarray:
    """The recorded surface: geometric mean over runs of each (invocation, candidate) median."""
    return np.exp(np.log(md.us).mean(axis=0))


def flat(md: ModeData) -> np.ndarray:
    """Every candidate equal: each invocation's geometric mean over candidates."""
    base = recorded_truth(md)
    return np.repeat(np.exp(np.log(base).mean(axis=1, keepdims=True)), base.shape[1], axis=1)


def phase_split(md: ModeData, effect: float = 0.15) -> np.ndarray:
    """Fused best for decode, unfused best for prefill, by ``effect``; tiles equal."""
    truth = flat(md)
    decode = (md.features["phase"].astype(str) == "decode").to_numpy()
    better = np.where(decode[:, None], md.fused[None, :], ~md.fused[None, :])
    return truth * np.where(better, 1.0 - effect, 1.0)


def beyond_phase(md: ModeData, effect: float) -> np.ndarray:
    """Headroom the phase split cannot capture: within decode, short-context invocations want tile A
    and long-context ones tile B (by ``effect``); prefill wants tile A."""
    truth = flat(md)
    feats = md.features
    kv = np.log2(np.maximum(feats["kv_len"].to_numpy(float), 1.0))
    decode = (feats["phase"].astype(str) == "decode").to_numpy()
    long_ctx = decode & (kv > np.median(kv[decode]))
    tiles = sorted(set(md.tile[~md.native]))
    tile_a, tile_b = tiles[0], tiles[min(2, len(tiles) - 1)]
    want = np.where(long_ctx, tile_b, tile_a)
    fast = (md.tile[None, :] == want[:, None]) & ~md.native[None, :]
    return truth * np.where(fast, 1.0 - effect, 1.0)


def true_policy_gain(md: ModeData, truth: np.ndarray, opts: Options, costs: LifecycleCosts) -> float:
    """The noise-free figure: procedure fitted on the truth and scored on it."""
    from headroom.analysis.policies import fit_mode

    t = with_us(md, np.broadcast_to(truth, (3, *truth.shape)).copy())
    n_train, fits = fit_mode(t, costs, opts, 0.5, 0)
    rows = pd.DataFrame(figures.mode_figures(t, fits, n_train, replace(opts, bootstrap_resamples=1), 0))
    return float(rows.loc[rows["figure"] == "policy_gain", "estimate"].iloc[0])


def planted(md: ModeData, target_pct: float, opts: Options, costs: LifecycleCosts) -> np.ndarray:
    """``beyond_phase`` with the effect that makes the true net gain over phase-keyed ``target_pct``."""
    lo, hi = 0.0, 0.9
    for _ in range(40):
        mid = (lo + hi) / 2
        if true_policy_gain(md, beyond_phase(md, mid), opts, costs) < target_pct:
            lo = mid
        else:
            hi = mid
    return beyond_phase(md, (lo + hi) / 2)


def longer_trace(md: ModeData, invocations: int, seed: int = 0) -> ModeData:
    """A synthetic trace of ``invocations`` drawn (with replacement) from the study's invocations."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, md.us.shape[1], size=invocations)
    feats = md.features.iloc[idx].reset_index(drop=True).assign(invocation=np.arange(invocations))
    return replace(md, features=feats, us=md.us[:, idx], sem2=md.sem2[:, idx])


def reference_mode(study_dir, mode: str) -> ModeData:
    """One mode of a recorded study (trace + portfolio runs) as arrays."""
    from pathlib import Path

    d = Path(study_dir)
    trace = pd.read_parquet(d / "trace.parquet")
    runs = pd.concat([pd.read_parquet(p) for p in sorted((d / "portfolio").glob("run-?.parquet"))])
    return next(m for m in crossrun.mode_data(trace, runs) if m.mode == mode)
