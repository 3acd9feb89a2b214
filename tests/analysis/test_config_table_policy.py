"""A family's per-M config table scored as the policy `config-table` (headroom.policies.lookup,
headroom.decide.engine): its choices are fixed by the table (nearest M, ties to the smaller), not fitted
on the trace; a config absent from the timings falls back to the global candidate; a study without a
table scores what it always did."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from headroom.decide import policy_eval
from headroom.families import Feature
from headroom.policies import from_dict, make
from headroom.policies.fit import Train
from headroom.policies.shapes import Keying

CAPTURE = [1, 2, 4, 8, 16, 32, 64]
BASE = Keying.of_features({"tokens": Feature("int", capture_fixed=True, pad_to=CAPTURE)})
SMALL, MID, LARGE = CANDIDATES = ("cfg-small", "cfg-mid", "cfg-large")
FAST = {"bootstrap_resamples": 50, "random_draws": 5}


def _keying(table: dict[int, str]) -> Keying:
    return dataclasses.replace(BASE, table=tuple(sorted(table.items())), table_feature="tokens")


def _trace(n: int = 120) -> pd.DataFrame:
    tokens = np.random.default_rng(7).choice([1, 2, 3, 5, 8, 24, 40, 64], size=n)
    return pd.DataFrame(
        {
            "invocation": range(n),
            "family": "toy",
            "step": range(n),
            "step_kind": np.where(tokens > 8, "mixed", "decode-only"),
            "time_s": np.arange(n) * 0.01,
            "shape_key": [f"tokens={t}" for t in tokens],
            "tokens": tokens,
            "weight": np.where(tokens > 8, 2.0, 1.0),
        }
    )


def _us(tokens: int) -> dict[str, float]:
    """Noise-free: small is best below 16 tokens, large above, mid between them."""
    base = 10.0 + 0.5 * tokens
    big = tokens >= 16
    return {SMALL: base * (1 + 0.3 * big), MID: base * 1.15, LARGE: base * (1 + 0.3 * (not big))}


def _timings(tr: pd.DataFrame, runs=(1, 2)) -> pd.DataFrame:
    rows = [
        {"run": run, "mode": mode, "invocation": inv.invocation, "candidate": c, "fused": False,
         "median_us": us, "std_us": 0.1, "reps": 20}
        for run in runs for mode in ("eager", "graph") for inv in tr.itertuples()
        for c, us in _us(int(inv.tokens)).items()
    ]  # fmt: skip
    return pd.DataFrame(rows)


def _evaluate(keying: Keying, tr=None, tm=None, lifecycle=None) -> pd.DataFrame:
    tr = _trace() if tr is None else tr
    tm = _timings(tr) if tm is None else tm
    return policy_eval.evaluate(tr, tm, lifecycle, train_fraction=0.5, seed=0, keying=keying, **FAST)


def _rows(frame: pd.DataFrame, policy: str) -> pd.DataFrame:
    return frame[(frame["policy"] == policy) & (frame["fusion"] == "free")]


def _by_hand(tr: pd.DataFrame, n_train: int, choose) -> float:
    """The weighted test latency of choosing ``choose(tokens)`` on every test invocation."""
    test = tr.iloc[n_train:]
    return float(
        sum(w * _us(int(t))[choose(int(t))] for t, w in zip(test["tokens"], test["weight"], strict=True))
    )


def test_its_test_latency_is_the_tables_nearest_m_choice_summed_by_hand():
    table = {1: SMALL, 16: MID, 64: LARGE}  # 8 -> 1 (7 < 8), 40 -> 16 (a tie: the smaller), 24 -> 16
    tr = _trace()
    frame = _evaluate(_keying(table), tr)
    rows = _rows(frame, "config-table")
    assert len(rows) == 4  # 2 runs x 2 modes
    expected = {1: SMALL, 2: SMALL, 3: SMALL, 5: SMALL, 8: SMALL, 24: MID, 40: MID, 64: LARGE}
    for row in rows.itertuples():
        assert row.test_us == pytest.approx(_by_hand(tr, row.train_invocations, expected.get), rel=1e-12)
        assert row.deployable and not row.selected
        assert set(row.candidates_used.split(",")) == set(CANDIDATES)
    assert frame["policy"].tolist()[-1] == "config-table"  # after every existing policy


def test_a_table_of_the_oracles_choice_has_no_gap_to_the_oracle():
    table = {1: SMALL, 8: SMALL, 24: LARGE, 40: LARGE, 64: LARGE}
    rows = _rows(_evaluate(_keying(table)), "config-table")
    assert np.allclose(rows["gap_to_oracle_pct"], 0.0, atol=1e-9)
    assert (rows["gain_vs_global_pct"] > 5.0).all()


def test_a_config_absent_from_the_timings_falls_back_to_the_global_candidate():
    tr = _trace()
    table = {1: SMALL, 64: "cfg-gone"}  # every M above 32 would run the untimed config
    rows = _rows(_evaluate(_keying(table), tr), "config-table")
    for row in rows.itertuples():
        fallback = row.global_candidate
        expected = _by_hand(tr, row.train_invocations, lambda m, fb=fallback: SMALL if m <= 32 else fb)
        assert row.test_us == pytest.approx(expected, rel=1e-12)
    n_train = int(rows["train_invocations"].iloc[0])
    train = Train(tr.iloc[:n_train], np.array([list(_us(int(t)).values()) for t in tr["tokens"][:n_train]]),
                  CANDIDATES)  # fmt: skip
    policy = make("config-table", _keying(table)).fit(train)
    assert policy.missing == ("cfg-gone",)
    assert policy.lookup({"tokens": 40}) == CANDIDATES[policy.fallback]
    assert policy.lookup({"tokens": 32}) == SMALL  # a tie between 1 and 64 goes to 1


def test_without_a_table_there_is_no_row_and_the_other_rows_are_unchanged():
    with_table = _evaluate(_keying({1: SMALL, 16: MID, 64: LARGE}))
    without = _evaluate(BASE)
    assert "config-table" not in set(without["policy"])
    others = with_table[with_table["policy"] != "config-table"].reset_index(drop=True)
    pd.testing.assert_frame_equal(others, without)


def test_its_unmeasured_lookup_is_charged_as_exact_keys():
    lifecycle = pd.DataFrame(
        {"kind": "dispatch", "policy": ["exact-key", "bucketed"], "value": [300.0, 900.0], "unit": "ns"}
    )
    frame = _evaluate(_keying({1: SMALL, 64: LARGE}), lifecycle=lifecycle)
    eager = frame[(frame["mode"] == "eager") & (frame["fusion"] == "free")].set_index(["run", "policy"])
    row = eager.loc[(1, "config-table")]
    assert "exact-key" in row["dispatch_basis"]
    # no switch or compile is measured: what a call pays is its lookup alone, exact-key's 300 ns
    assert row["cost_per_invocation_us"] == pytest.approx(0.3)
    assert eager.loc[(1, "exact-key"), "cost_per_invocation_us"] == pytest.approx(0.3)


def test_the_policy_round_trips_through_its_plain_data_and_needs_a_table():
    keying = _keying({1: SMALL, 16: MID, 64: LARGE})
    assert Keying.from_dict(keying.to_dict()) == keying
    assert "table" not in BASE.to_dict() and Keying.from_dict(BASE.to_dict()) == BASE
    tr = _trace()
    train = Train(tr, np.array([list(_us(int(t)).values()) for t in tr["tokens"]]), (LARGE, SMALL, MID))
    policy = make("config-table", keying).fit(train)
    again = from_dict(policy.to_dict())
    assert again.keying == keying and again.table == policy.table
    assert [again.lookup({"tokens": m}) for m in (1, 9, 40, 41, 5000)] == [SMALL, MID, MID, LARGE, LARGE]
    with pytest.raises(ValueError, match="config table"):
        make("config-table", BASE)
    data = policy.to_dict()
    del data["keying"]
    with pytest.raises(ValueError, match=r"missing \['keying'\]"):
        from_dict(data)


def test_of_record_reads_a_familys_config_table():
    from tests.family_sets import RECORD

    record = {**RECORD, "config_table": {"feature": "tokens", "entries": [[1, SMALL], [64, LARGE]],
                                         "configs": [], "source": "t.json", "blake3": "0" * 64}}  # fmt: skip
    keying = Keying.of_record(record)
    assert keying.table == ((1, SMALL), (64, LARGE)) and keying.table_feature == "tokens"
    assert dataclasses.replace(keying, table=(), table_feature=None) == Keying.of_record(RECORD)


def test_the_lifecycle_times_the_tables_lookup_only_for_a_family_with_one():
    from headroom.measure import lifecycle

    tr = _trace()
    cfg = {"dispatch_lookups": 50, "dispatch_repeats": 2}
    fit = {"train_fraction": 0.5, "clusters": 2, "seed": 0}
    keying = _keying({1: SMALL, 16: MID, 64: LARGE})
    rows = lifecycle.dispatch_rows(tr, list(CANDIDATES), cfg, "cpu", fit, keying)
    assert [r["policy"] for r in rows] == [*lifecycle.DISPATCH_POLICIES, "config-table"]
    plain = lifecycle.dispatch_rows(tr, list(CANDIDATES), cfg, "cpu", fit, BASE)
    assert [r["policy"] for r in plain] == list(lifecycle.DISPATCH_POLICIES)
    fitted = lifecycle.fitted_policies(tr, list(CANDIDATES), **fit, keying=keying)["config-table"]
    assert [fitted.lookup({"tokens": m}) for m in (3, 40, 64)] == [SMALL, MID, LARGE]  # its own table
