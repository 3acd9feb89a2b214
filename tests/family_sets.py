"""A kernel family's study on hand-built frames (no GPU, no family import): a `@triton.autotune`-like
family of three configs keyed on `tokens` (capture-fixed, padded to CAPTURE), `hidden` and `dtype`,
whose small config wins below 16 tokens and large one above. ``recommend`` runs the decision and the
recommendation on it as the stages do; ``write_study`` (tests.recommendation_sets) writes its folder.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from headroom.analysis import recommendation
from headroom.decide import decision, figures
from headroom.policies.shapes import Keying
from tests import analysis_sets as S

CAPTURE = [1, 2, 4, 8, 16, 32, 64]
#: What a family's trace provenance records of it (headroom.families.loading.Loaded.identity)
RECORD = {
    "name": "toy",
    "version": "2",
    "spec": "tests.toy:FAMILY",
    "source_blake3": "f" * 64,
    "files": ["tests/toy.py"],
    "features": {
        "dtype": {"kind": "category", "capture_fixed": True, "pad_to": None, "min": None, "max": None},
        "hidden": {"kind": "int", "capture_fixed": True, "pad_to": None, "min": 1, "max": None},
        "tokens": {"kind": "int", "capture_fixed": True, "pad_to": CAPTURE, "min": 1, "max": 4096},
    },
    "feature_order": ["tokens", "hidden", "dtype"],
}
KEYING = Keying.of_record(RECORD)
#: (id, params): the autotuner's configs as from_triton_autotune makes them
CONFIGS = {
    "BLOCK128-w1-s3": {"BLOCK": 128, "num_ctas": 1, "num_stages": 3, "num_warps": 1},
    "BLOCK512-w2-s3": {"BLOCK": 512, "num_ctas": 1, "num_stages": 3, "num_warps": 2},
    "BLOCK2048-w8-s2": {"BLOCK": 2048, "num_ctas": 1, "num_stages": 2, "num_warps": 8},
}
SMALL, MID, LARGE = CONFIGS
FAST = {"bootstrap_resamples": 200, "random_draws": 10}
META = {"study": "toy", "decision_blake3": "d" * 64, "kernel_source_blake3": None}


def trace(n: int = 160, seed: int = 7) -> pd.DataFrame:
    """A family trace (headroom.families.study.TRACE_COLUMNS, then its features, then its costs)."""
    rng = np.random.default_rng(seed)
    tokens = rng.choice([1, 2, 3, 5, 8, 24, 40, 64], size=n)
    kind = np.where(tokens > 8, "prefill-only", "decode-only")
    shapes = [{"tokens": int(t), "hidden": 512, "dtype": "float16"} for t in tokens]
    return pd.DataFrame(
        {
            "invocation": np.arange(n, dtype=np.int64),
            "family": "toy",
            "step": np.arange(n, dtype=np.int64) * 3,
            "step_kind": kind,
            "time_s": np.arange(n) * 0.01,
            "shape_key": [f"tokens={s['tokens']}|hidden=512|dtype=float16" for s in shapes],
            "shape": [json.dumps(s, sort_keys=True) for s in shapes],
            "weight": 2.0,
            "tokens": tokens.astype(np.int64),
            "hidden": np.int64(512),
            "dtype": "float16",
            "cost_flops": 4.0 * 512 * tokens,
            "cost_bytes": 4.0 * 512 * tokens + 1024,
        }
    )


def candidates() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "candidate": list(CONFIGS),
            "family": "toy",
            "params": [json.dumps(p, sort_keys=True) for p in CONFIGS.values()],
        }
    )


def timings(tr: pd.DataFrame, effect: float, runs=(1, 2, 3), modes=("eager", "graph")) -> pd.DataFrame:
    """The family portfolio's rows: small wins below 16 tokens, large above, by ``effect``; 1% noise."""
    rng = np.random.default_rng(11)
    index = {c: i for i, c in enumerate(CONFIGS)}
    rows = []
    for run in runs:
        for mode in modes:
            for inv in tr.itertuples():
                base = 10.0 + 0.5 * inv.tokens
                big = inv.tokens >= 16
                us = {SMALL: base * (1 + effect * big), MID: base * (1 + effect / 2),
                      LARGE: base * (1 + effect * (not big))}  # fmt: skip
                for c in CONFIGS:
                    rows.append({"run": run, "mode": mode, "invocation": inv.invocation,
                                 "shape_key": inv.shape_key, "candidate": c, "fused": False,
                                 "backend": "family", "tile": index[c],
                                 "median_us": us[c] * rng.lognormal(0, 0.01), "std_us": 0.1,
                                 "reps": 20})  # fmt: skip
    return pd.DataFrame(rows)


def lifecycle() -> pd.DataFrame:
    return pd.DataFrame(columns=["kind", "candidate", "policy", "mode", "value", "unit", "status"])


def recommend(effect: float = 0.3, device: str = "cuda", record: dict | None = None):
    """(trace, decision, recommendation table, dispatch content) of the toy family's study."""
    tr = trace()
    tm = timings(tr, effect)
    figs = figures.study_figures(tr, tm, None, train_fraction=0.5, seed=0, keying=KEYING, **FAST)
    d = decision.decide(figs, None, S.environment(device), min_test_invocations=5, keying=KEYING)
    env = S.environment(device).assign(driver="580.1", torch="2.13.0", triton="3.6.0")
    table, content = recommendation.build(
        d, tr, tm, None, candidates(), S.calibration(), env,
        meta=META, policies={"train_fraction": 0.5, "seed": 0, **FAST},
        intermediate_ratio=3.5, keying=KEYING, family=RECORD if record is None else record,
    )  # fmt: skip
    return tr, d, table, content
