"""What a study could detect: its policy figure's power against headroom a deployable policy can
learn, simulated on the study's own trace, noise, costs, design and thresholds.

The simulation makes surfaces and noise only; every figure and state comes from the engine and the
rule the decision uses (``headroom.decide.engine``, ``headroom.decide.rule``), called with a leading
seed axis. The validation of the rule itself (coverage, error rates, designs) is the same machinery
run at length: tools/validation/simulate.py.

Noise model (log scale, per mode), estimated from the study being decided (``estimate_noise``):

    log us[r, i, c] = log truth[i, c] + run[r] + block[r, i] + cand_run[r, c] + resid[r, i, c]

run: a run offset; block: an offset shared by every candidate of invocation i in run r, AR(1) along
the trace (drift and neighbouring-call correlation); cand_run: a candidate x run effect; resid: the
rest (which includes the within-run noise of each median). ``within_sd`` is what the within-run
samples imply for one median (std_us / sqrt(reps), relative): each simulated median carries that
standard error (sem2 = (within_sd x us)^2), so regret-aware sees what it sees in a study.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np

from headroom.core import parallel
from headroom.decide import engine, rule
from headroom.decide.costs import LifecycleCosts
from headroom.decide.measured import ModeData, Options
from headroom.policies.shapes import padded

POWER = 0.8
POWER_EFFECTS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5)
POWER_SEEDS = 100  # per effect: the MDE's Monte Carlo error is a few tenths of a point
DECIDED_FIGURES = (*rule.DECIDED, *rule.HOLD_BY.values())
POWER_RESAMPLES = 200  # bootstrap resamples per simulated study (the rate, not one interval, is wanted)


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
            self,
            run_sd=self.run_sd * k,
            block_sd=self.block_sd * k,
            cand_run_sd=self.cand_run_sd * k,
            resid_sd=self.resid_sd * k,
            within_sd=self.within_sd * k,
        )

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
        md.mode,
        float(np.std(run) * np.sqrt(c)),
        float(np.std(block) * np.sqrt(c)),
        float(np.clip(ar, 0, 0.95)),
        float(np.std(cand_run) * np.sqrt(c)),
        float(np.std(resid) * np.sqrt(c)),
        float(np.median(rel_within)),
    )


def draw_batch(
    truth: np.ndarray, model: NoiseModel, seeds: int, runs: int, rng: np.random.Generator
) -> np.ndarray:
    """(seeds, runs, N, C) simulated medians around ``truth`` (N, C)."""
    n, c = truth.shape
    eps = rng.standard_normal((seeds, runs, n))
    block = np.empty_like(eps)
    block[..., 0] = eps[..., 0]
    phi = model.block_ar
    for i in range(1, n):  # AR(1) with unit marginal variance
        block[..., i] = phi * block[..., i - 1] + np.sqrt(1 - phi**2) * eps[..., i]
    log = (
        np.log(truth)[None, None]
        + model.run_sd * rng.standard_normal((seeds, runs, 1, 1))
        + model.block_sd * block[..., None]
        + model.cand_run_sd * rng.standard_normal((seeds, runs, 1, c))
        + model.resid_sd * rng.standard_normal((seeds, runs, n, c))
    )
    return np.exp(log)


def noise(md: ModeData, model: NoiseModel, seeds: int, runs: int, seed: int) -> np.ndarray:
    """Multiplicative noise at scale 1, (seeds, runs, N, C); scale k is this to the power k."""
    return draw_batch(np.ones(md.us.shape[1:]), model, seeds, runs, np.random.default_rng(seed))


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


def learnable_class(md: ModeData) -> np.ndarray:
    """The shape class a planted effect lives in, from the family's keying: the invocations of the
    first category (attention: decodes; all of them when it has none) whose first capture-fixed
    feature, padded (attention: the padded batch size, the CUDA Graph they replay), is at least its
    median there; without capture-fixed features, or with one padded size, the first numeric feature
    (attention: the number of new tokens) instead. Every deployable policy of both modes can learn
    it from the train split: batch-keyed keys on it, exact-key, bucketed and clustered see it."""
    feats, k = md.features, md.keying
    codes = k.category_codes(feats)
    pool = codes == 0 if (codes == 0).any() else np.ones(len(codes), bool)
    if not k.numeric:  # categories alone: the last category against the rest
        return codes == codes.max()
    if k.capture:
        f, _, sizes = k.capture[0]
        x = np.array([padded(int(v), sizes) for v in feats[f]])
        cls = pool & (x >= np.median(x[pool]))
        if not cls.all():
            return cls
    x = feats[k.numeric[0][0]].to_numpy(float)
    return pool & (x >= np.median(x[pool]))


def beyond_category(md: ModeData, effect: float) -> np.ndarray:
    """Headroom the category split cannot capture: the invocations of ``learnable_class`` want base
    config B and the rest base config A (by ``effect``); every other candidate is flat."""
    truth = flat(md)
    bases = sorted(set(md.base[~md.native]))
    base_a, base_b = bases[0], bases[min(2, len(bases) - 1)]
    want = np.where(learnable_class(md), base_b, base_a)
    fast = (md.base[None, :] == want[:, None]) & ~md.native[None, :]
    return truth * np.where(fast, 1.0 - effect, 1.0)


# ----------------------------------------------------------------------------------------------
# Simulated studies decided by the rule, and the power statement
# ----------------------------------------------------------------------------------------------


def redraw_rows(L: engine.Layout, seeds: int, rng: np.random.Generator) -> np.ndarray:
    """(seeds, n_test) the trace's test invocations each seed's test positions hold: drawn with
    replacement within each position's stratum (step kind), so every seed keeps the trace's design
    and the truth target is the expected figure over new test invocations of the same workload."""
    strata = L.strata[L.n_train :]
    rows = np.empty((seeds, len(strata)), np.int64)
    for code in np.unique(strata):
        members = np.flatnonzero(strata == code)
        rows[:, members] = members[rng.integers(0, len(members), size=(seeds, len(members)))]
    return rows


def simulate(
    L: engine.Layout,
    truth: np.ndarray,
    noise_: np.ndarray,
    thresholds: dict,
    within_sd: float = 0.0,
    batch: int = 25,
    redraw: bool = True,
    seed: int = 20240610,
    only=None,
    decide: bool = True,
) -> dict[str, np.ndarray]:
    """Figures and the rule's states per seed for ``truth`` (N, C) under ``noise_`` (seeds, R, N, C):
    the engine and ``rule.family`` on each simulated study; '<figure>_true' the truth targets. With
    ``redraw`` each seed's test invocations are redrawn (``redraw_rows``). thresholds: the decision
    section (config ``decision:``); only: the figures to compute (default: every one); decide: apply
    the rule (it needs the decided figures)."""
    rng = np.random.default_rng(seed)
    thr = {f: float(thresholds[rule.THRESHOLD_OF[f]]) for f in rule.DECIDED}
    nt = L.n_train
    parts = []
    for i in range(0, len(noise_), batch):
        z = noise_[i : i + batch]
        rows, t = None, truth
        if redraw:
            rows = redraw_rows(L, len(z), rng)
            t = np.concatenate(
                [np.broadcast_to(truth[:nt], (len(z), *truth[:nt].shape)), truth[nt + rows]], 1
            )
            us = t[:, None] * z
        else:
            us = truth[None, None] * z
        f = engine.figures(L, engine.Batch(us, (within_sd * us) ** 2, rows), t, only)
        f = {
            k: v
            for k, v in f.items()
            if k not in ("selected", "baseline", "order") and not k.endswith("_boot")
        }
        if decide:
            f.update(rule.family(f, thr))
        parts.append(f)
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def curve_point(
    md: ModeData, L: engine.Layout, model: NoiseModel, noise_: np.ndarray, thresholds: dict, effect: float
) -> dict:
    """One point of the power curve: P(the policy figure exceeds) with ``effect`` planted where a
    deployable policy can learn it (``beyond_category``); x is the policy figure's truth target (%)."""
    r = simulate(L, beyond_category(md, effect), noise_, thresholds, model.within_sd, only=DECIDED_FIGURES)
    return {
        "effect": effect,
        "true_policy_gain_pct": float(np.nanmean(r["policy_gain_true"])),
        "policy_exceeds": float(np.mean(r["policy_gain_state"] == "exceeds")),
        "continue": float(np.mean(r["verdict"] == "continue")),
    }


def power_curve(
    md: ModeData,
    L: engine.Layout,
    model: NoiseModel,
    noise_: np.ndarray,
    thresholds: dict,
    effects=POWER_EFFECTS,
) -> list[dict]:
    """The curve_point of each effect, in order."""
    return [curve_point(md, L, model, noise_, thresholds, e) for e in effects]


def power_statement(curve: list[dict], power: float = POWER) -> dict:
    """{'mde_pct': the smallest true policy gain (%) at which P(policy exceeds) reaches ``power``
    (linear interpolation between curve points), or NaN; 'up_to_pct': the largest true gain tried;
    'max_power': the largest power seen; 'text': the statement, which never calls a bound an MDE}."""
    c = sorted(curve, key=lambda r: r["true_policy_gain_pct"])
    x = np.array([r["true_policy_gain_pct"] for r in c])
    y = np.array([r["policy_exceeds"] for r in c])
    up_to, top = float(np.nanmax(x)), float(np.max(y))
    above = np.flatnonzero((y >= power) & (x > 0))
    if not len(above):
        text = f"no effect up to {up_to:.2f}% reaches {power:.0%} power (largest power seen {top:.0%})"
        return {"mde_pct": float("nan"), "up_to_pct": up_to, "max_power": top, "text": text}
    i = above[0]
    mde = (
        float(x[i])
        if i == 0
        else float(x[i - 1] + (power - y[i - 1]) * (x[i] - x[i - 1]) / (y[i] - y[i - 1]))
    )
    text = f"minimum detectable net gain at {power:.0%} power: {mde:.2f}%"
    return {"mde_pct": mde, "up_to_pct": up_to, "max_power": top, "text": text}


@dataclass(frozen=True)
class _Setup:
    """One mode's power simulation, set up once: what every point of its curve shares."""

    md: ModeData
    L: engine.Layout
    model: NoiseModel
    noise: np.ndarray
    thresholds: dict
    seeds: int


def _setup(md, costs, opts, thresholds, train_fraction, seed, seeds) -> _Setup:
    opts = replace(opts, bootstrap_resamples=min(opts.bootstrap_resamples, POWER_RESAMPLES))
    L = engine.layout(md, opts, costs, train_fraction, seed)
    model = estimate_noise(md)
    return _Setup(md, L, model, noise(md, model, seeds, len(md.runs), seed), thresholds, seeds)


def _statement(setup: _Setup, curve: list[dict]) -> dict:
    return {
        "mode": setup.md.mode,
        **power_statement(curve),
        "power": POWER,
        "threshold_pct": float(setup.thresholds["max_policy_gain_pct"]),
        "invocations": int(setup.md.us.shape[1]),
        "runs": len(setup.md.runs),
        "seeds": setup.seeds,
    }


def detectable_effect(
    md: ModeData,
    costs: LifecycleCosts,
    opts: Options,
    thresholds: dict,
    train_fraction: float,
    seed: int,
    *,
    seeds: int = POWER_SEEDS,
) -> dict:
    """The power statement of one mode of a study, from the decision stage's own verified inputs: its
    trace, every run, its noise, costs, options and thresholds (noise 1x): what a `stop` on it can rule
    out."""
    return detectable_effects([md], costs, opts, thresholds, train_fraction, seed, seeds=seeds, workers=1)[
        md.mode
    ]


def detectable_effects(
    modes: list[ModeData],
    costs: LifecycleCosts,
    opts: Options,
    thresholds: dict,
    train_fraction: float,
    seed: int,
    *,
    seeds: int = POWER_SEEDS,
    workers: int | None = None,
) -> dict[str, dict]:
    """detectable_effect of each mode, {mode: statement}: every (mode, effect) point of the power
    curves is independent (each simulation seeds its own generator), so they run in `workers` forked
    processes (default: the cores this process may use) with the same numbers as one process."""
    with detecting(
        modes, costs, opts, thresholds, train_fraction, seed, seeds=seeds, workers=workers
    ) as found:
        return found()


@contextlib.contextmanager
def detecting(
    modes: list[ModeData],
    costs: LifecycleCosts,
    opts: Options,
    thresholds: dict,
    train_fraction: float,
    seed: int,
    *,
    seeds: int = POWER_SEEDS,
    workers: int | None = None,
) -> Iterator[Callable[[], dict[str, dict]]]:
    """detectable_effects started now in forked workers while this process goes on inside the block
    (the decision stage computes its figures meanwhile); yields a function that waits for them and
    returns {mode: statement}, the same numbers."""
    setups = [_setup(md, costs, opts, thresholds, train_fraction, seed, seeds) for md in modes]
    tasks = [(i, e) for i in range(len(setups)) for e in POWER_EFFECTS]
    calls = [(curve_point, (*_args(setups[i]), e)) for i, e in tasks]
    with parallel.forked_started(calls, workers) as points:
        yield lambda: _statements(setups, tasks, points())


def _statements(setups: list[_Setup], tasks: list[tuple[int, float]], points: list[dict]) -> dict[str, dict]:
    out = {}
    for i, s in enumerate(setups):
        curve = [p for (j, _), p in zip(tasks, points, strict=True) if j == i]
        out[s.md.mode] = _statement(s, curve)
    return out


def _args(s: _Setup) -> tuple:
    return s.md, s.L, s.model, s.noise, s.thresholds
