"""What was measured, as arrays: one mode's runs of the same trace, the options of the procedure,
the train/test split, the step kinds, deployment-profile parts and weights of the invocations, and
the checks on the inputs.

A study's mode holds R runs of the same trace: ``us[r, i, c]`` is run r's median µs of candidate c on
invocation i. The first ``train_fraction`` of the invocations (trace order) train, the rest test; the
last ``validation_fraction`` of train is where the best deployable policy is chosen (fitted on the part
before it). The estimator itself is ``headroom.decide.engine``.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace

import numpy as np
import pandas as pd

from headroom.core import contracts, defaults
from headroom.core.names import BASE_CONFIG, CAPTURED, OURS_BACKENDS, TRACE_CATEGORY, UNCAPTURED
from headroom.decide.costs import LifecycleCosts, lifecycle_costs
from headroom.policies.shapes import Keying, builtin
from headroom.trace.requests import STEP_KIND
from headroom.trace.requests import STEP_KIND_OF_PHASE as STEP_OF_CATEGORY

# The fusion arms: `off` and `on` our unfused and fused candidates (RoPE fusion is ours: natives have
# none), `free` every candidate that competes (``ModeData.natives_compete``), natives included.
FUSION_ARMS = ("off", "on", "free")
# The trace contract's columns the analysis reads (all but dtype).
TRACE_COLUMNS = tuple(c for c in contracts.TRACE_COLUMNS if c != "dtype")
TIMING_COLUMNS = ("run", "invocation", "candidate", "fused", "median_us")
# The profile's step kind of a serving trace's `step` values, and of its category (TRACE_CATEGORY)
# without them: one table each, the trace sampler's (headroom.trace.requests).
STEP_TYPE = STEP_KIND
# The profile's step kind of a family's step kinds (headroom.families.Step.kind): an unchunked
# engine's prefill-only step is profiled like a mixed one.
STEP_KIND_OF_FAMILY_STEP = {"decode-only": "decode-only", "mixed": "mixed", "prefill-only": "mixed"}
# The deployment profile of a family captured by a feature (headroom.families' optional member
# `captured_by`, recorded in its keying): its calls up to the feature's capture limit replay CUDA
# graphs, larger ones run eager, whatever the step (vLLM's piecewise graphs hold a MoE layer of
# decode and mixed steps alike). Fixed by what `captured` means: not configurable.
CAPTURE_PROFILE = {CAPTURED: "graph", UNCAPTURED: "eager"}
# Eager timings recorded before the GPU-only method (portfolio timing_method 'cuda_events'): calls
# timed back to back, so a short call's figure is the host's launch path. Reported, never decided.
HOST_INCLUDED = "cuda_events"


def _default(key: str):
    return defaults.value("policies", key)


@dataclass(frozen=True)
class Options:
    """Tunables of ``evaluate``; the keys of config ``policies:`` besides train_fraction and seed."""

    # Every default is the default study's (config/config.yaml `policies:`, where each is explained).
    clusters: int = field(default_factory=lambda: _default("clusters"))
    random_draws: int = field(default_factory=lambda: _default("random_draws"))
    bootstrap_resamples: int = field(default_factory=lambda: _default("bootstrap_resamples"))
    confidence: float = field(default_factory=lambda: _default("confidence"))
    deployment_invocations: int = field(default_factory=lambda: _default("deployment_invocations"))
    layers_per_forward: int = field(default_factory=lambda: _default("layers_per_forward"))
    validation_fraction: float = field(default_factory=lambda: _default("validation_fraction"))

    @classmethod
    def from_mapping(cls, options: Mapping) -> Options:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"options: unknown key(s) {unknown}; known: {sorted(known)}")
        opts = cls(**options)
        for name in (
            "clusters",
            "random_draws",
            "bootstrap_resamples",
            "deployment_invocations",
            "layers_per_forward",
        ):
            value = getattr(opts, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                raise ValueError(f"options.{name} must be a positive integer, got {value!r}")
        if not 0.5 < float(opts.confidence) < 1.0:
            raise ValueError(f"options.confidence must be in (0.5, 1), got {opts.confidence!r}")
        if not 0.0 < float(opts.validation_fraction) < 1.0:
            raise ValueError(
                f"options.validation_fraction must be in (0, 1), got {opts.validation_fraction!r}"
            )
        return opts


def in_arm(arm: str, fused: bool, native: bool, natives: bool = True) -> bool:
    """Whether a candidate takes part in a fusion arm: a native only in ``free`` and only where
    ``natives`` compete; ours in ``free`` and in the arm of its fused flag."""
    if native:
        return arm == "free" and natives
    return arm == "free" or fused == (arm == "on")


def group_seed(seed: int, *labels) -> np.random.Generator:
    key = zlib.crc32("|".join(map(str, labels)).encode())
    return np.random.default_rng(np.random.SeedSequence([int(seed), key]))


# ----------------------------------------------------------------------------------------------
# One mode's measurements as arrays
# ----------------------------------------------------------------------------------------------


@dataclass
class ModeData:
    """us/sem2: (R, N, C); features: the N trace rows in order; per-candidate names/fused/native/base
    (base: its base config, what it is apart from its fusion arm; each its own where the timings do
    not record one); host_us (R, N, C): each call's host enqueue time where the portfolio measured it
    (else None); timing: the portfolio's timing methods ('spin-events', 'cuda_events', 'host_clock',
    ...)."""

    mode: str
    runs: list
    features: pd.DataFrame
    us: np.ndarray
    sem2: np.ndarray
    names: list[str]
    fused: np.ndarray
    native: np.ndarray
    base: np.ndarray
    dropped: list[str] = field(default_factory=list)
    host_us: np.ndarray | None = None
    timing: tuple[str, ...] = ()
    keying: Keying = field(default_factory=builtin)  # the family's keys (headroom.policies.shapes)

    @property
    def host_included(self) -> bool:
        """Eager timings whose figures include the host's launch path (recorded back to back)."""
        return self.mode == "eager" and HOST_INCLUDED in self.timing

    @property
    def natives_compete(self) -> bool:
        """Whether the natives are candidates of the `free` arm: not where the figures include the
        host's launch path (``host_included``: a native's host path against ours is no kernel
        comparison), so neither the global kernel nor a policy picks one on such figures."""
        return not self.host_included

    def arms(self) -> tuple[str, ...]:
        """The arms with at least one admitted candidate."""
        return tuple(a for a in FUSION_ARMS if len(self.arm_cols(a)))

    def arm_cols(self, arm: str) -> np.ndarray:
        compete = self.natives_compete
        ok = [in_arm(arm, bool(f), bool(n), compete) for f, n in zip(self.fused, self.native, strict=True)]
        return np.flatnonzero(ok)

    def ours(self) -> np.ndarray:
        """The columns of our candidates (natives out): what ``kernel_vs_*`` holds against the rest."""
        return np.flatnonzero(~self.native)


def _pivot(group: pd.DataFrame, column: str) -> pd.DataFrame:
    return group.pivot(index="invocation", columns="candidate", values=column).sort_index()


def mode_data(trace: pd.DataFrame, timings: pd.DataFrame, keying: Keying | None = None) -> list[ModeData]:
    """Per mode, the runs' invocation x candidate matrices over the candidates timed everywhere,
    keyed by the family's ``keying`` (None: the built-in family's)."""
    keying = keying or builtin()
    features = trace.set_index("invocation")
    timings = timings if "mode" in timings.columns else timings.assign(mode="eager")
    out = []
    for mode, group in timings.groupby("mode", sort=True):
        dup = group.duplicated(["run", "invocation", "candidate"])
        if dup.any():
            first = group.loc[dup, ["run", "invocation", "candidate"]].iloc[0].tolist()
            raise ValueError(f"timings (mode {mode}): duplicate (run, invocation, candidate) row {first}")
        runs = sorted(group["run"].unique())
        meds = {r: _pivot(g, "median_us") for r, g in group.groupby("run")}
        invocations = meds[runs[0]].index
        if any(not m.index.equals(invocations) for m in meds.values()):
            raise ValueError(f"timings (mode {mode}): the runs did not time the same invocations")
        complete = [
            c for c in meds[runs[0]].columns if all(c in m and m[c].notna().all() for m in meds.values())
        ]
        if not complete:
            raise ValueError(f"timings (mode {mode}): no candidate is timed on every invocation")
        us = np.stack([meds[r][complete].to_numpy(np.float64) for r in runs])
        if (us <= 0).any():
            raise ValueError(f"timings (mode {mode}): median_us must be positive")
        first = group.drop_duplicates("candidate").set_index("candidate").loc[complete]
        out.append(
            ModeData(
                mode=str(mode),
                runs=runs,
                features=features.loc[invocations].reset_index(),
                us=us,
                sem2=_sem2(group, runs, invocations, complete),
                names=complete,
                fused=first["fused"].astype(bool).to_numpy(),
                native=(~first["backend"].astype(str).isin(OURS_BACKENDS)).to_numpy()
                if "backend" in first.columns
                else np.zeros(len(complete), bool),
                base=first[BASE_CONFIG].fillna(-1).astype(int).to_numpy()
                if BASE_CONFIG in first.columns
                else np.arange(len(complete)),
                dropped=sorted(set(group["candidate"]) - set(complete)),
                host_us=_matrix(group, runs, invocations, complete, "host_us"),
                timing=tuple(sorted(set(group["timing_method"].astype(str))))
                if "timing_method" in group.columns
                else (),
                keying=keying,
            )
        )  # fmt: skip  (one constructor, read top to bottom)
    return out


def _matrix(group, runs, invocations, complete, column: str) -> np.ndarray | None:
    """(R, N, C) of a per-cell column, or None where the timings do not record it everywhere."""
    if column not in group.columns or group[column].isna().any():
        return None
    return np.stack(
        [
            _pivot(group[group["run"] == r], column).loc[invocations, complete].to_numpy(np.float64)
            for r in runs
        ]
    )


def _sem2(group, runs, invocations, complete) -> np.ndarray:
    """Squared standard error of each median (std_us^2 / reps); zeros when not recorded."""
    if not {"std_us", "reps"} <= set(group.columns):
        return np.zeros((len(runs), len(invocations), len(complete)))
    out = []
    for r in runs:
        g = group[group["run"] == r]
        std = _pivot(g, "std_us").loc[invocations, complete].fillna(0.0).to_numpy(np.float64)
        reps = _pivot(g, "reps").loc[invocations, complete].fillna(1).to_numpy(np.float64)
        out.append(std**2 / np.maximum(reps, 1.0))
    return np.stack(out)


def plan_charges(md: ModeData, costs: LifecycleCosts, opts: Options) -> np.ndarray:
    """(n, C) plan charge per call of a mode's trace (``LifecycleCosts.plan_charges``), as the engine
    charges it."""
    shapes = md.features["shape_key"].astype(str).tolist() if "shape_key" in md.features else []
    return costs.plan_charges(md.mode, md.names, shapes, md.us.shape[1], opts.layers_per_forward)


def split(n: int, train_fraction: float, validation_fraction: float) -> tuple[int, int]:
    """(n_train, n_fit): train is [0, n_train), its fit part [0, n_fit), validation [n_fit, n_train)."""
    n_train = int(math.floor(n * float(train_fraction)))
    n_fit = n_train - int(math.ceil(n_train * float(validation_fraction)))
    return n_train, n_fit


# ----------------------------------------------------------------------------------------------
# Step kinds, profile parts, strata and weights of the invocations
# ----------------------------------------------------------------------------------------------


def step_of(features: pd.DataFrame) -> np.ndarray:
    """Each invocation's step kind (decode-only or mixed): from a family trace's ``step_kind``
    (``STEP_KIND_OF_FAMILY_STEP``), else from the trace's ``step`` column where a serving trace
    records it (``STEP_TYPE``), else from its category column (``TRACE_CATEGORY``,
    ``STEP_OF_CATEGORY``)."""
    if "step_kind" in features.columns:
        kinds = features["step_kind"].astype(str)
        unknown = sorted(set(kinds) - set(STEP_KIND_OF_FAMILY_STEP))
        if unknown:
            raise ValueError(
                f"trace column step_kind holds {unknown}: known are {sorted(STEP_KIND_OF_FAMILY_STEP)}"
            )
        return kinds.map(STEP_KIND_OF_FAMILY_STEP).to_numpy().astype(str)
    category = features[TRACE_CATEGORY].astype(str).map(STEP_OF_CATEGORY)
    if "step" not in features.columns:
        return category.to_numpy().astype(str)
    recorded = features["step"]
    unknown = sorted(set(recorded.dropna().astype(str)) - set(STEP_TYPE))
    if unknown:
        raise ValueError(f"trace column step holds {unknown}: known step values are {sorted(STEP_TYPE)}")
    return recorded.map(STEP_TYPE, na_action="ignore").fillna(category).to_numpy().astype(str)


def strata_of(features: pd.DataFrame) -> np.ndarray:
    """(n,) a code per step kind: the bootstrap draws test invocations within each."""
    return pd.factorize(pd.Series(step_of(features)), sort=True)[0].astype(np.int64)


def weights_of(features: pd.DataFrame) -> np.ndarray:
    """(n,) how many of the window's invocations each invocation stands for: the trace's ``weight``
    (a stratified sample), else 1."""
    if "weight" not in features.columns:
        return np.ones(len(features))
    w = features["weight"].astype(float).to_numpy()
    if not (np.isfinite(w) & (w > 0)).all():
        raise ValueError("trace column weight must be positive and finite")
    return w


def part_of(features: pd.DataFrame, keying: Keying | None = None) -> np.ndarray:
    """Each invocation's deployment-profile part: for a family captured by a feature F
    (``keying.captured_by``) ``captured`` where F is at most its capture limit (the largest of its
    ``pad_to``: the call replays a CUDA graph when deployed) and ``uncaptured`` above it (eager,
    ``CAPTURE_PROFILE``); for every other family its step kind (``step_of``). The bootstrap's strata
    stay the step kinds (``strata_of``): they are the trace sampler's."""
    if keying is None or keying.captured_by is None:
        return step_of(features)
    feature = keying.captured_by
    if feature not in features.columns:
        raise ValueError(f"trace: no column {feature!r}, the feature its family is captured by")
    within = features[feature].astype(np.int64).to_numpy() <= keying.capture_limit
    return np.where(within, CAPTURED, UNCAPTURED)


def part(md: ModeData, name: str) -> ModeData | None:
    """The mode's invocations of one deployment-profile part (``part_of``: a step kind, or for a
    family captured by a feature ``captured``/``uncaptured``), in trace order (None when it has
    none)."""
    mask = part_of(md.features, md.keying) == name
    if not mask.any():
        return None
    feats = md.features[mask].reset_index(drop=True)
    host = None if md.host_us is None else md.host_us[:, mask]
    return replace(md, features=feats, us=md.us[:, mask], sem2=md.sem2[:, mask], host_us=host)


# ----------------------------------------------------------------------------------------------
# The inputs, checked
# ----------------------------------------------------------------------------------------------


def check_columns(df: pd.DataFrame, required, name: str) -> None:
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"{name} must be a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ValueError(f"{name}: missing column(s) {missing}; see DESIGN.md 'Required columns'")


def trace_columns(keying: Keying) -> tuple[str, ...]:
    """The trace columns the analysis reads: the built-in family's contract, or a family's keyed
    features."""
    if keying == builtin():
        return TRACE_COLUMNS
    features = (*keying.categories, *(f for f, _ in keying.numeric))
    return ("invocation", "shape_key", *dict.fromkeys(features))


def check_inputs(trace, timings, train_fraction, keying: Keying | None = None) -> None:
    if not isinstance(train_fraction, int | float) or not 0.0 < float(train_fraction) < 1.0:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction!r}")
    check_columns(trace, trace_columns(keying or builtin()), "trace")
    check_columns(timings, TIMING_COLUMNS, "timings")
    if trace["invocation"].duplicated().any():
        raise ValueError("trace: invocation must be unique (one row per invocation)")
    unknown = sorted(set(timings["invocation"]) - set(trace["invocation"]))
    if unknown:
        raise ValueError(f"timings: invocation(s) {unknown[:5]} are not in the trace")


def checked_modes(
    trace,
    timings,
    lifecycle,
    train_fraction: float,
    options: Mapping,
    calibration=None,
    intermediate_ratio=None,
    keying: Keying | None = None,
):
    """Check the inputs; (opts, the lifecycle's costs, each mode's ModeData), keyed by the family's
    ``keying`` (None: the built-in family's). With the calibration and the decoder-layer model's
    ``intermediate_ratio``, the built-in family's eager timings carry the host time the GPU does not
    hide (headroom.families.attention.layer.host_bound); another family has no layer model."""
    keying = keying or builtin()
    opts = Options.from_mapping(options)
    check_inputs(trace, timings, train_fraction, keying)
    modes = mode_data(trace, timings, keying)
    if calibration is not None and intermediate_ratio is not None and keying == builtin():
        from headroom.families.attention.layer import host_bound

        modes = [host_bound(md, calibration, intermediate_ratio) for md in modes]
    return opts, lifecycle_costs(lifecycle), modes
