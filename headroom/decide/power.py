"""A simulator of portfolio runs with a known true surface, to validate the decision rule.

It makes surfaces and noise only; every figure, interval and verdict comes from the decision engine
(``headroom.decide.engine``), the code the pipeline runs, called with a leading seed axis.

Noise model (log scale, per mode), estimated from the recorded study being decided (``estimate_noise``)
so that a kernel or harness change re-estimates it:

    log us[r, i, c] = log truth[i, c] + run[r] + block[r, i] + cand_run[r, c] + resid[r, i, c]

run: a run offset; block: an offset shared by every candidate of invocation i in run r, AR(1) along the
trace (drift and neighbouring-call correlation); cand_run: a candidate x run effect; resid: the rest
(which includes the within-run noise of each median). ``within_sd`` is what the within-run samples
imply for one median (std_us / sqrt(reps), relative): each simulated median carries that standard
error (sem2 = (within_sd x us)^2), so regret-aware sees what it sees in a study.
``between_over_within`` — the variance of the candidate-specific run-to-run part over that — says how
much a single run's samples understate it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy import stats

from headroom.core import defaults
from headroom.decide import decision, engine, measured, registry
from headroom.decide.costs import LifecycleCosts
from headroom.decide.measured import ModeData, Options


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


def with_us(md: ModeData, us: np.ndarray) -> ModeData:
    runs = list(range(1, us.shape[0] + 1))
    return replace(md, us=us, runs=runs, sem2=np.zeros_like(us))


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


def learnable_class(md: ModeData) -> np.ndarray:
    """The shape class a planted effect lives in: decodes whose padded batch size (the CUDA Graph they
    replay) is at least the decodes' median. Every deployable policy of both modes can learn it from
    the train split: batch-keyed keys on it (graph mode's deployable policy), exact-key, bucketed and
    clustered see the batch too."""
    feats = md.features
    pad = np.array([registry.padded_batch(int(b)) for b in feats["batch"]])
    decode = (feats["phase"].astype(str) == "decode").to_numpy()
    return decode & (pad >= np.median(pad[decode])) if decode.any() else decode


def beyond_phase(md: ModeData, effect: float) -> np.ndarray:
    """Headroom the phase split cannot capture: the invocations of ``learnable_class`` want tile B and
    the rest tile A (by ``effect``); every other candidate is flat."""
    truth = flat(md)
    tiles = sorted(set(md.tile[~md.native]))
    tile_a, tile_b = tiles[0], tiles[min(2, len(tiles) - 1)]
    want = np.where(learnable_class(md), tile_b, tile_a)
    fast = (md.tile[None, :] == want[:, None]) & ~md.native[None, :]
    return truth * np.where(fast, 1.0 - effect, 1.0)


def longer_trace(md: ModeData, invocations: int, seed: int = 0) -> ModeData:
    """A synthetic trace of ``invocations`` drawn (with replacement) from the study's invocations."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, md.us.shape[1], size=invocations)
    feats = md.features.iloc[idx].reset_index(drop=True).assign(invocation=np.arange(invocations))
    return replace(md, features=feats, us=md.us[:, idx], sem2=md.sem2[:, idx])


def strided_trace(md: ModeData, invocations: int) -> ModeData:
    """``invocations`` evenly spaced invocations of the study's trace, in time order."""
    idx = np.unique(np.linspace(0, md.us.shape[1] - 1, invocations).round().astype(int))
    feats = md.features.iloc[idx].reset_index(drop=True).assign(invocation=np.arange(len(idx)))
    return replace(md, features=feats, us=md.us[:, idx], sem2=md.sem2[:, idx])


def reference_mode(study_dir, mode: str) -> ModeData:
    """One mode of a recorded study (trace + portfolio runs) as arrays."""
    from pathlib import Path

    d = Path(study_dir)
    trace = pd.read_parquet(d / "trace.parquet")
    runs = pd.concat([pd.read_parquet(p) for p in sorted((d / "portfolio").glob("run-?.parquet"))])
    return next(m for m in measured.mode_data(trace, runs) if m.mode == mode)


def draw_batch(
    truth: np.ndarray, model: NoiseModel, seeds: int, runs: int, rng: np.random.Generator
) -> np.ndarray:
    """(seeds, runs, N, C) simulated medians around ``truth`` (N, C): ``draw`` for many seeds at once."""
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


# ----------------------------------------------------------------------------------------------
# Validation of the decision on a recorded study: scenarios, power curve, minimum detectable effect
# ----------------------------------------------------------------------------------------------


@dataclass
class RecordedMode:
    """One mode of a recorded study with what the simulation needs: its costs, options, noise."""

    name: str
    md: ModeData
    costs: LifecycleCosts
    opts: Options
    thresholds: dict
    model: NoiseModel


def config_options(bootstrap_resamples: int | None = None) -> tuple[Options, dict]:
    """The pipeline's policies options and decision section (config/config.yaml)."""
    pol = {k: v for k, v in defaults.section("policies").items() if k not in ("train_fraction", "seed")}
    if bootstrap_resamples:
        pol["bootstrap_resamples"] = bootstrap_resamples
    return Options.from_mapping(pol), defaults.section("decision")


def load_recorded_mode(study_dir, mode: str, bootstrap_resamples: int | None = 200) -> RecordedMode:
    """A recorded study's mode, its lifecycle costs, the pipeline's options and its estimated noise."""
    from pathlib import Path

    from headroom.decide.costs import lifecycle_costs

    d = Path(study_dir)
    md = reference_mode(d, mode)
    life = d / "lifecycle.parquet"
    costs = lifecycle_costs(pd.read_parquet(life)) if life.exists() else LifecycleCosts()
    opts, thresholds = config_options(bootstrap_resamples)
    return RecordedMode(d.name, md, costs, opts, thresholds, estimate_noise(md))


def _noise(md: ModeData, model: NoiseModel, seeds: int, runs: int, seed: int) -> np.ndarray:
    """Multiplicative noise at scale 1, (seeds, runs, N, C); scale k is this to the power k."""
    return draw_batch(np.ones(md.us.shape[1:]), model, seeds, runs, np.random.default_rng(seed))


REDRAW_SEED = 20240610


def layout(s: RecordedMode) -> engine.Layout:
    """The engine's layout of a study's mode (its trace, costs, options, the pipeline's split and seed)."""
    pol = defaults.section("policies")
    return engine.layout(s.md, s.opts, s.costs, pol["train_fraction"], pol["seed"])


def decide_mode(mode: str, figs: dict, thresholds: dict, confidence: float) -> dict[str, np.ndarray]:
    """One mode decided alone, per seed, by the engine's rule (the mode's own Holm family, as its
    ``mode_verdict`` in decision.parquet): '<figure>_state', 'verdict', 'names_phase_split'."""
    thr = {f: float(thresholds[decision.THRESHOLD_OF[f]]) for f in engine.DECIDED}
    family = [
        {
            "estimate": figs[f],
            "se": figs[f"{f}_se"],
            "df": figs[f"{f}_df"],
            "ci_high": figs[engine.HOLD_BY.get(f, f) + "_hi"],
            "threshold": thr[f],
        }
        for f in engine.DECIDED
    ]
    out = engine.rule(family, 1.0 - confidence)
    res = {}
    for j, f in enumerate(engine.DECIDED):
        state = np.where(out["holds"][:, j], "holds", "inconclusive")
        state = np.where(~np.isfinite(figs[f"{f}_hi"]), "no-interval", state)
        res[f"{f}_state"] = np.where(out["exceeds"][:, j], "exceeds", state)
    res["verdict"] = out["verdict"]
    res.update(candidate_states(figs, thr))
    # the reason names the phase split when the gap exceeds and the policy figure does not
    res["names_phase_split"] = out["exceeds"][:, 0] & ~out["exceeds"][:, 1]
    return res


def candidate_states(figs: dict, thr: dict) -> dict[str, np.ndarray]:
    """Per candidate interval (``INTERVALS``), what each decided figure's CI alone says: '<short>_exceeds_<iv>'
    (its lower end above the threshold: Holm's first step at the rule's level), '<short>_holds_<iv>' (the
    upper end of its HOLD_BY figure's CI below it) and 'stop_<iv>' (every figure holds)."""
    out = {}
    for iv, (lo, hi) in INTERVALS.items():
        holds = []
        for f, short in zip(engine.DECIDED, ("gap", "policy"), strict=True):
            out[f"{short}_exceeds_{iv}"] = figs[f + lo] > thr[f]
            holds.append(figs[engine.HOLD_BY.get(f, f) + hi] < thr[f])
            out[f"{short}_holds_{iv}"] = holds[-1]
        out[f"stop_{iv}"] = np.logical_and.reduce(holds)
    return out


def _sem2(us: np.ndarray, model: NoiseModel) -> np.ndarray:
    """Each simulated median's squared standard error: the within-run sd the study's samples imply."""
    return (model.within_sd * us) ** 2


def run_mc(
    s: RecordedMode,
    L: engine.Layout,
    truth: np.ndarray,
    noise: np.ndarray,
    scale: float = 1.0,
    batch: int = 100,
    redraw: bool = True,
    sem2: np.ndarray | None = None,
) -> pd.DataFrame:
    """Figures, states and verdict per seed for ``truth`` under ``noise ** scale`` (engine calls).

    redraw: each seed's test invocations are drawn with replacement from the trace's test part (the
    train part stays), so the truth target — the mean over seeds of the fitted procedure's figure
    scored on the truth — is the expected figure over new test invocations of the same workload,
    the population the CI's invocation bootstrap speaks for. Without it the trace is fixed and the
    target is the figure on these very test invocations. sem2: the medians' squared standard errors
    (default: ``_sem2`` of the noise at ``scale``: noise x k carries standard errors x k), e.g. a
    recorded study's own."""
    parts = []
    rng = np.random.default_rng(REDRAW_SEED)
    nt, n = L.n_train, L.n
    keep = ("selected", "baseline", "order")
    for i in range(0, len(noise), batch):
        z = noise[i : i + batch] ** scale
        rows, t = None, truth
        if redraw:
            rows = rng.integers(0, n - nt, size=(len(z), n - nt))
            t = np.concatenate(
                [np.broadcast_to(truth[:nt], (len(z), nt, truth.shape[1])), truth[nt + rows]], 1
            )
            us = t[:, None] * z
        else:
            us = truth[None, None] * z
        s2 = _sem2(us, s.model.scaled(scale)) if sem2 is None else sem2[i : i + batch]
        figs = engine.figures(L, engine.Batch(us, s2, rows), t)
        figs = {k: v for k, v in figs.items() if k not in keep}
        parts.append(pd.DataFrame({**figs, **decide_mode(s.md.mode, figs, s.thresholds, s.opts.confidence)}))
    return pd.concat(parts, ignore_index=True)


def effect_for_truth(
    s: RecordedMode, L: engine.Layout, make, target: float, figure: str, noise: np.ndarray, scale: float = 1.0
) -> float:
    """The effect for which the truth target of ``figure`` (mean of '<figure>_true' over ``noise``'s
    seeds) is ``target``; ``make(effect)`` builds the true surface. Bisection on [0, 0.9]."""
    lo, hi = 0.0, 0.9
    for _ in range(12):
        mid = (lo + hi) / 2
        if run_mc(s, L, make(mid), noise, scale)[f"{figure}_true"].mean() < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _rate(x) -> tuple[float, float, float]:
    """Proportion and its 95% Clopper-Pearson interval (the Monte Carlo tolerance)."""
    x = np.asarray(x, bool)
    k, n = int(x.sum()), len(x)
    lo = stats.beta.ppf(0.025, k, n - k + 1) if k > 0 else 0.0
    hi = stats.beta.ppf(0.975, k + 1, n - k) if k < n else 1.0
    return k / n, float(lo), float(hi)


# candidate intervals (``headroom.decide.interval``; engine keys): Welch t (decision v3's rule), t on
# n_test - 1 df, bootstrap-t (decision v3.1's rule), all three fixed in advance of v3.1's choice;
# bootstrap-t with the unbiased run part (added after it); bootstrap-t with the run part from its variance
# components (decision v3.3's two candidates; the rule's since v3.3: the first); and the rule's
INTERVALS = {
    "welch": ("_lo_w", "_hi_w"),
    "t_ntest": ("_lo_n", "_hi_n"),
    "boot_t": ("_lo_b", "_hi_b"),  # decision v3.1's rule
    "boot_t_u": ("_lo_u", "_hi_u"),  # added after the choice (intervals.run_variance_unbiased)
    "boot_t_c": ("_lo_c", "_hi_c"),  # decision v3.3's candidates (intervals.run_variance_components):
    "boot_t_c1": ("_lo_c1", "_hi_c1"),  # its Welch-Satterthwaite df, and R - 1 df
    "rule": ("_lo", "_hi"),  # the rule's: v3.3 boot_t_c for engine.RULE_INTERVAL, boot_t otherwise
}
COVERED = ("gap_to_oracle", "gap_to_oracle_bound", "policy_gain")


def covers(mc: pd.DataFrame, figure: str, interval: str = "rule") -> pd.Series:
    """Whether each seed's CI (one of ``INTERVALS``) holds the figure's truth target."""
    lo, hi = INTERVALS[interval]
    target = mc[f"{figure}_true"].mean()
    return (mc[figure + lo] <= target) & (target <= mc[figure + hi])


def summarize(mc: pd.DataFrame) -> dict:
    """One scenario's outcome: rates with their Clopper-Pearson intervals, coverage per candidate
    interval, truth targets and median half-widths."""
    out = {"seeds": len(mc)}
    events = {
        "continue": mc["verdict"] == "continue",
        "stop": mc["verdict"] == "stop",
        "policy_exceeds": mc["policy_gain_state"] == "exceeds",
        "policy_holds": mc["policy_gain_state"] == "holds",
        "gap_exceeds": mc["gap_to_oracle_state"] == "exceeds",
        "gap_holds": mc["gap_to_oracle_state"] == "holds",
        "names_phase_split": mc["names_phase_split"],
    }
    for iv in INTERVALS:
        for f in COVERED:
            events[f"{f}_coverage_{iv}"] = covers(mc, f, iv)
        for e in ("gap_exceeds", "gap_holds", "policy_exceeds", "policy_holds", "stop"):
            events[f"{e}_{iv}"] = mc[f"{e}_{iv}"]
    for name, x in events.items():
        out[name], out[f"{name}_lo"], out[f"{name}_hi"] = _rate(x)
    for f in COVERED:
        out[f"{f}_true"] = float(mc[f"{f}_true"].mean())
        out[f"{f}_mean"] = float(mc[f].mean())
        out[f"{f}_halfwidth"] = float(((mc[f"{f}_hi"] - mc[f"{f}_lo"]) / 2).median())
    return out


POWER_EFFECTS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5)
POWER_SCALES = (0.25, 1.0, 4.0)


def power_curve(s: RecordedMode, L: engine.Layout, noise: np.ndarray, effects=POWER_EFFECTS, scales=(1.0,)):
    """P(policy figure exceeds) and P(continue) against an effect planted between shape classes the
    deployable policies can learn (``beyond_phase``), per noise scale; x is the truth target of the
    policy figure (%), not the planted multiplier."""
    rows = []
    for k in scales:
        for e in effects:
            r = summarize(run_mc(s, L, beyond_phase(s.md, e), noise, k))
            keep = ("policy_exceeds", "policy_exceeds_lo", "policy_exceeds_hi", "continue")
            rows.append({"noise_scale": k, "effect": e, "true_policy_gain_pct": r["policy_gain_true"]})
            rows[-1].update({key: r[key] for key in keep})
    return pd.DataFrame(rows)


def power_statement(curve: pd.DataFrame, power: float = 0.8) -> dict:
    """{'mde_pct': the smallest true policy gain (%) at which P(policy exceeds) reaches ``power``
    (linear interpolation between curve points), or NaN; 'up_to_pct': the largest true gain tried;
    'max_power': the largest power seen; 'text': the statement, which never calls a bound an MDE}."""
    c = curve.sort_values("true_policy_gain_pct")
    x, y = c["true_policy_gain_pct"].to_numpy(), c["policy_exceeds"].to_numpy()
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


def detectable_effect(study_dir, mode: str = "graph", *, seeds: int = 200, seed: int = 0) -> dict:
    """The power statement of one mode of a recorded study (its own trace, noise and costs, the study's
    number of runs, noise 1x): what a `stop` on it can rule out. A few seconds."""
    s = load_recorded_mode(study_dir, mode)
    curve = power_curve(s, layout(s), _noise(s.md, s.model, seeds, len(s.md.runs), seed))
    return {
        "mode": mode,
        **power_statement(curve),
        "power": 0.8,
        "threshold_pct": float(s.thresholds["max_policy_gain_pct"]),
        "invocations": int(s.md.us.shape[1]),
        "runs": len(s.md.runs),
        "seeds": seeds,
    }


@dataclass(frozen=True)
class Design:
    """The study design a validation simulates: portfolio runs and trace invocations; None keeps the
    recorded study's. A shorter trace keeps evenly spaced invocations of the recorded one (what the
    trace's stride sampler would keep, so the phase mix stays the study's); a longer one resamples
    them with replacement (``longer_trace``). So the same GPU time can be priced as more runs of a
    shorter trace."""

    runs: int | None = None
    invocations: int | None = None

    def apply(self, s: RecordedMode, seed: int = 0) -> tuple[RecordedMode, int]:
        """(the recorded mode with this design's trace, its number of runs)."""
        n, recorded = self.invocations, s.md.us.shape[1]
        if n is None or n == recorded:
            md = s.md
        elif n < recorded:
            md = strided_trace(s.md, n)
        else:
            md = longer_trace(s.md, n, seed)
        return replace(s, md=md), int(self.runs or len(s.md.runs))


def validate(
    study_dir,
    *,
    seeds: int = 400,
    seed: int = 0,
    modes=("graph", "eager"),
    bootstrap_resamples: int = 200,
    design: Design = Design(),
    power: bool = True,
    effects: dict | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The acceptance scenarios of issue 18 item 10 on one recorded study: (scenarios, power curves;
    empty without ``power``). effects: {(mode, scenario): effect} of boundary nulls already sized (an
    earlier run's 'effect' column: the pilot is seeded, so the bisection would find the same)."""
    rows, curves = [], [pd.DataFrame()]
    for mode in modes:
        s, runs = design.apply(load_recorded_mode(study_dir, mode, bootstrap_resamples), seed)
        rows += _scenarios(
            s, seeds, seed, runs, {k[1]: v for k, v in (effects or {}).items() if k[0] == mode}
        )
        if not power:
            continue
        c = power_curve(s, layout(s), _noise(s.md, s.model, seeds, runs, seed + 5), scales=POWER_SCALES)
        curves.append(c.assign(study=s.name, mode=mode, runs=runs, invocations=s.md.us.shape[1]))
    return pd.DataFrame(rows), pd.concat(curves, ignore_index=True)


def _scenarios(s: RecordedMode, seeds: int, seed: int, runs: int, effects: dict) -> list[dict]:
    """Flat surfaces at noise 0.5-4x; the gap's and the policy figure's boundary nulls (truth exactly
    at the threshold; the gap's truth is against the true oracle) at noise 1x, sized by bisection
    unless ``effects`` (scenario -> effect) gives the size."""
    md, L = s.md, layout(s)
    noise = _noise(md, s.model, seeds, runs, seed + 3)
    pilot = _noise(md, s.model, 100, runs, seed + 1003)
    base = {"study": s.name, "mode": md.mode, "runs": runs, "invocations": md.us.shape[1]}
    rows = []
    for k in (0.5, 1.0, 2.0, 4.0):
        rows.append(
            {
                **base,
                "scenario": "flat",
                "noise_scale": k,
                "effect": 0.0,
                **summarize(run_mc(s, L, flat(md), noise, k)),
            }
        )
    thr = s.thresholds
    for scenario, make, figure, target in (
        ("boundary-gap", lambda x: phase_split(md, x), "gap_to_oracle_bound", thr["max_gap_to_oracle_pct"]),
        ("boundary-policy", lambda x: beyond_phase(md, x), "policy_gain", thr["max_policy_gain_pct"]),
    ):
        e = effects[scenario] if scenario in effects else effect_for_truth(s, L, make, target, figure, pilot)
        mc = run_mc(s, L, make(e), noise)
        rows.append({**base, "scenario": scenario, "noise_scale": 1.0, "effect": e, **summarize(mc)})
    return rows


@dataclass
class ProfilePart:
    """One part of the deployment profile (a mode's invocations of one step type) ready to simulate."""

    step: str
    s: RecordedMode
    L: engine.Layout
    runs: int


def profile_parts(study_dir, bootstrap_resamples=200, design: Design = Design(), seed: int = 0):
    """The deployment profile's parts (``figures.part``) of a recorded study, each with its mode's
    noise, costs and options; a step type the trace lacks has no part."""
    from headroom.decide import figures

    parts = []
    for step, mode in figures.deployment_profile().items():
        s, runs = design.apply(load_recorded_mode(study_dir, mode, bootstrap_resamples), seed)
        sub = figures.part(s.md, step)
        if sub is not None:
            ps = replace(s, md=sub)
            parts.append(ProfilePart(step, ps, layout(ps), runs))
    return parts


def profile_rule(parts: list[ProfilePart], mcs: list[pd.DataFrame]) -> dict[str, np.ndarray]:
    """The headline per seed: the parts' decided figures as one Holm family (``engine.rule``), as
    ``decision`` decides it; 'exceeds' and 'holds' (S, 2 x parts) in the parts' order."""
    family = []
    for p, mc in zip(parts, mcs, strict=True):
        thr = {f: float(p.s.thresholds[decision.THRESHOLD_OF[f]]) for f in engine.DECIDED}
        family += [
            {
                "estimate": mc[f].to_numpy(),
                "se": mc[f"{f}_se"].to_numpy(),
                "df": mc[f"{f}_df"].to_numpy(),
                "ci_high": mc[engine.HOLD_BY.get(f, f) + "_hi"].to_numpy(),
                "threshold": thr[f],
            }
            for f in engine.DECIDED
        ]
    return engine.rule(family, 1.0 - parts[0].s.opts.confidence)


def _part_noise(p: ProfilePart, seeds: int, seed: int) -> np.ndarray:
    return _noise(p.s.md, p.s.model, seeds, p.runs, seed + 17)


def profile_mc(
    study_dir,
    *,
    seeds: int = 400,
    seed: int = 0,
    scales=(0.5, 1.0, 2.0, 4.0),
    bootstrap_resamples=200,
    design: Design = Design(),
):
    """The deployment profile's headline on flat surfaces: each part simulated from its mode's noise,
    the parts' decided figures one Holm family (``profile_rule``). The trace is fixed (test
    invocations not redrawn): rates of verdicts, not coverage. One row per noise scale."""
    parts = profile_parts(study_dir, bootstrap_resamples, design, seed)
    rows = []
    for k in scales:
        mcs = [run_mc(p.s, p.L, flat(p.s.md), _part_noise(p, seeds, seed), k, redraw=False) for p in parts]
        verdict = profile_rule(parts, mcs)["verdict"]
        row = {"study": parts[0].s.name, "scenario": "flat", "noise_scale": k, "seeds": seeds}
        row["runs"] = parts[0].runs
        for v in ("continue", "stop"):
            row[v], row[f"{v}_lo"], row[f"{v}_hi"] = _rate(verdict == v)
        rows.append(row)
    return pd.DataFrame(rows)


def planted_part(parts: list[ProfilePart]) -> int:
    """The part an effect is planted in: the first graph-mode part (decode-only steps by default),
    where the profile's headline can move; else the first."""
    return next((i for i, p in enumerate(parts) if p.s.md.mode == "graph"), 0)


def _profile_outcome(parts, mcs, i: int) -> dict:
    """Headline rates, and the planted part's states in the headline's family and its coverage."""
    out = profile_rule(parts, mcs)
    row = summarize(mcs[i])  # the planted part alone: coverage, truths, its mode's own states
    row = {k: v for k, v in row.items() if "coverage" in k or k.endswith(("_true", "_halfwidth"))}
    events = {
        "continue": out["verdict"] == "continue",
        "stop": out["verdict"] == "stop",
        "gap_exceeds": out["exceeds"][:, 2 * i],
        "policy_exceeds": out["exceeds"][:, 2 * i + 1],
        "policy_holds": out["holds"][:, 2 * i + 1],
    }
    for name, x in events.items():
        row[name], row[f"{name}_lo"], row[f"{name}_hi"] = _rate(x)
    return row


def profile_scenarios(
    study_dir, *, seeds=400, seed=0, bootstrap_resamples=200, design: Design = Design()
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The deployment profile's boundary nulls, coverage and power (noise 1x, test invocations redrawn):
    an effect between learnable shape classes (``beyond_phase``) planted in one part (``planted_part``),
    the other parts flat; sized so that the planted part's gap (its bound: the true gap) or policy
    figure is at its threshold, and swept for the power curve (P(its policy figure exceeds in the
    headline's family)). (scenario rows, power curve)."""
    parts = profile_parts(study_dir, bootstrap_resamples, design, seed)
    i = planted_part(parts)
    p = parts[i]
    noise = [_part_noise(q, seeds, seed) for q in parts]
    others = [run_mc(q.s, q.L, flat(q.s.md), noise[j]) for j, q in enumerate(parts)]
    pilot = _noise(p.s.md, p.s.model, 100, p.runs, seed + 1003)
    base = {"study": p.s.name, "part": f"{p.s.md.mode}@{p.step}", "runs": p.runs, "seeds": seeds}
    rows, curve = [], []
    thr = p.s.thresholds
    for scenario, figure, target in (
        ("boundary-gap", "gap_to_oracle_bound", thr["max_gap_to_oracle_pct"]),
        ("boundary-policy", "policy_gain", thr["max_policy_gain_pct"]),
    ):
        e = effect_for_truth(p.s, p.L, lambda x: beyond_phase(p.s.md, x), target, figure, pilot)
        mcs = [*others[:i], run_mc(p.s, p.L, beyond_phase(p.s.md, e), noise[i]), *others[i + 1 :]]
        rows.append({**base, "scenario": scenario, "effect": e, **_profile_outcome(parts, mcs, i)})
    for e in POWER_EFFECTS:
        mcs = [*others[:i], run_mc(p.s, p.L, beyond_phase(p.s.md, e), noise[i]), *others[i + 1 :]]
        r = _profile_outcome(parts, mcs, i)
        keep = ("policy_exceeds", "policy_exceeds_lo", "policy_exceeds_hi", "continue")
        curve.append({**base, "effect": e, "true_policy_gain_pct": r["policy_gain_true"]})
        curve[-1].update({k: r[k] for k in keep})
    return pd.DataFrame(rows), pd.DataFrame(curve)


def stop_sweep(study_dir, grid, *, mode="eager", seeds=100, seed=0, bootstrap_resamples=200) -> pd.DataFrame:
    """P(`stop` | flat) of one mode alone against the study design and the noise scale, and what binds
    it: the gap bound's mean (its winner's curse on a flat surface, whose true gap is 0) and median
    half-width, the cross-run gap's half-width, P(gap holds), P(policy figure holds). grid: pairs
    (Design, noise scales); test invocations redrawn per seed, as in the scenarios."""
    base = load_recorded_mode(study_dir, mode, bootstrap_resamples)
    rows = []
    for design, scales in grid:
        s, runs = design.apply(base, seed)
        L, noise = layout(s), _noise(s.md, s.model, seeds, runs, seed + 3)
        for k in scales:
            r = summarize(run_mc(s, L, flat(s.md), noise, k))
            rows.append(
                {
                    "mode": mode,
                    "runs": runs,
                    "invocations": s.md.us.shape[1],
                    "noise_scale": k,
                    "seeds": seeds,
                }
            )
            for name in ("stop", "gap_holds", "policy_holds"):
                rows[-1].update({f"{name}{e}": r[f"{name}{e}"] for e in ("", "_lo", "_hi")})
            for f in ("gap_to_oracle_bound", "gap_to_oracle"):
                rows[-1].update({f"{f}_mean": r[f"{f}_mean"], f"{f}_halfwidth": r[f"{f}_halfwidth"]})
    return pd.DataFrame(rows)
