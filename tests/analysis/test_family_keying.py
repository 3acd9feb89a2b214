"""The decision engine on a family other than attention (issue 32 item 4): the policies key on the
family's declared features, the step kinds come from the framework's `step_kind`, and a per-shape
effect that a capture-fixed feature predicts is found by the capture-keyed policy in graph mode."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from headroom.decide import figures, policy_eval
from headroom.families import Feature
from headroom.policies.shapes import Keying

CAPTURE = [1, 2, 4, 8, 16, 32, 64]
KEYING = Keying.of_features({"tokens": Feature("int", capture_fixed=True, pad_to=CAPTURE)})
CANDIDATES = ("cfg-small", "cfg-mid", "cfg-large")


def _trace(n: int = 160) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    tokens = rng.choice([1, 2, 3, 5, 8, 24, 40, 64], size=n)
    kind = np.where(tokens > 8, "mixed", "decode-only")
    return pd.DataFrame(
        {
            "invocation": range(n),
            "family": "toy",
            "step": range(n),
            "step_kind": kind,
            "time_s": np.arange(n) * 0.01,
            "shape_key": [f"tokens={t}" for t in tokens],
            "tokens": tokens,
            "weight": 1.0,
        }
    )


def _timings(tr: pd.DataFrame, effect: float, runs=(1, 2, 3)) -> pd.DataFrame:
    """small wins below 16 tokens, large above, by ``effect``; mid is in between; 1% noise."""
    rng = np.random.default_rng(11)
    rows = []
    for run in runs:
        for mode in ("eager", "graph"):
            for inv in tr.itertuples():
                base = 10.0 + 0.5 * inv.tokens
                big = inv.tokens >= 16
                us = {"cfg-small": base * (1 + effect * big), "cfg-mid": base * (1 + effect / 2),
                      "cfg-large": base * (1 + effect * (not big))}  # fmt: skip
                for c in CANDIDATES:
                    rows.append({"run": run, "mode": mode, "invocation": inv.invocation, "candidate": c,
                                 "fused": False, "median_us": us[c] * rng.lognormal(0, 0.01),
                                 "std_us": 0.1, "reps": 20})  # fmt: skip
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def evaluated():
    tr = _trace()
    return tr, policy_eval.evaluate(tr, _timings(tr, 0.3), train_fraction=0.5, seed=0, keying=KEYING)


def test_the_capture_keyed_policy_finds_what_the_token_count_predicts(evaluated):
    _, table = evaluated
    graph = table[(table["mode"] == "graph") & (table["fusion"] == "free")].set_index(["run", "policy"])
    for run in (1, 2, 3):
        assert graph.loc[(run, "batch-keyed"), "gain_vs_global_pct"] > 8.0
        assert graph.loc[(run, "batch-keyed"), "gap_to_oracle_pct"] < 2.0
        # one category key for a family without categories: phase-keyed is the global kernel
        assert abs(graph.loc[(run, "phase-keyed"), "gain_vs_global_pct"]) < 1e-9


def test_a_family_trace_needs_its_keyed_features_not_attentions_columns(evaluated):
    tr, _ = evaluated
    with pytest.raises(ValueError, match=r"missing column\(s\) \['tokens'\]"):
        policy_eval.evaluate(tr.drop(columns="tokens"), _timings(tr, 0.3), keying=KEYING)


def test_the_decided_figures_see_the_effect_and_the_profile_parts_come_from_step_kinds():
    tr = _trace()
    figs = figures.study_figures(tr, _timings(tr, 0.3), None, train_fraction=0.5, seed=0, keying=KEYING,
                                 switch_sensitivity=False)  # fmt: skip
    gain = figs[(figs["mode"] == "graph") & (figs["figure"] == "policy_gain")].iloc[0]
    assert gain["estimate"] > 10.0 and gain["ci_low"] > 5.0
    assert {"graph@decode-only", "eager@mixed"} <= set(figs["mode"])  # the default profile
