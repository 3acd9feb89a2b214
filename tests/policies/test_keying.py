"""Policies keyed on a family's declared features (issue 32 item 4): the category-keyed
(`phase-keyed`), capture-keyed (`batch-keyed`), bucketed and clustered policies read the family's
keying, attention's keying gives the keys its recorded studies were fitted with, and a fitted
policy of another family reads back from its plain data with its keying."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from headroom import policies
from headroom.families import Feature
from headroom.families.attention.keying import ATTENTION
from headroom.policies.fit import Train
from headroom.policies.shapes import Keying

CAPTURE = [1, 2, 4, 8, 16, 32]
FEATURES = {
    "tokens": Feature("int", capture_fixed=True, pad_to=CAPTURE),
    "layout": Feature("category", capture_fixed=True),
    "scale": Feature("float"),
}
KEYING = Keying.of_features(FEATURES)


def _trace(n: int = 40) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, 64, size=n)
    return pd.DataFrame(
        {
            "invocation": range(n),
            "tokens": tokens,
            "layout": np.where(np.arange(n) % 3 == 0, "col", "row"),
            "scale": rng.uniform(0.5, 3.0, size=n),
            "shape_key": [f"t{t}" for t in tokens],
        }
    )


def test_a_familys_keying_comes_from_its_declared_features():
    assert KEYING.categories == ("layout",)
    assert KEYING.numeric == (("tokens", "tokens="), ("scale", "scale="))
    assert KEYING.capture == (("tokens", "tokens=", tuple(CAPTURE)),)
    assert KEYING.cluster == ("tokens", "scale") and KEYING.dim == 2


def test_each_keyed_policy_keys_on_what_the_family_declares():
    shape = {"tokens": 5, "layout": "row", "scale": 1.5, "shape_key": "t5"}
    make = lambda name: policies.make(name, KEYING)  # noqa: E731
    assert make("phase-keyed").key(shape) == "row"
    assert make("batch-keyed").key(shape) == "row|tokens=8"  # padded to the capture size 8
    assert make("bucketed").key(shape) == "row|tokens=8|scale=2"
    assert make("exact-key").key(shape) == "t5"
    assert make("batch-keyed").features == ("layout", "tokens")
    above = {**shape, "tokens": 100}  # beyond the largest capture size: its own value
    assert make("batch-keyed").key(above) == "row|tokens=100"


def test_a_family_without_categories_has_one_category_key():
    keying = Keying.of_features({"tokens": Feature("int")})
    policy = policies.make("phase-keyed", keying)
    tr = _trace()
    assert policy.keys(tr) == [None] * len(tr)
    assert keying.category_codes(tr).tolist() == [0] * len(tr)
    assert policies.make("batch-keyed", keying).key({"tokens": 7}) == ""  # nothing fixed at capture


def test_the_table_and_the_lookup_agree_for_a_family_and_survive_json():
    tr = _trace()
    us = np.random.default_rng(1).lognormal(0.0, 0.3, size=(len(tr), 3))
    for name in sorted(policies.REGISTRY):
        policy = policies.make(name, KEYING)
        if name == "random":
            continue
        policy.fit(Train(tr, us, ("a", "b", "c"), clusters=3, seed=1))
        data = json.loads(json.dumps(policy.to_dict(), allow_nan=False))
        assert data["keying"] == KEYING.to_dict()
        loaded = policies.from_dict(data)
        assert loaded.keying == KEYING
        chosen = [policy.candidates[i] for i in policy.choose(tr)]
        assert [loaded.lookup(s) for s in tr.to_dict("records")] == chosen


def test_attentions_tables_are_written_without_a_keying():
    tr = pd.DataFrame({"phase": ["decode", "prefill"], "batch": [3, 1], "q_len": [1, 64], "kv_len": [90, 64]})
    policy = policies.make("batch-keyed").fit(Train(tr, np.ones((2, 2)), ("a", "b")))
    assert "keying" not in policy.to_dict() and policy.keying == ATTENTION
    assert policy.key({"phase": "decode", "batch": 3}) == "decode|b4"
    assert ATTENTION.category_codes(tr).tolist() == [0, 1]  # decode 0, prefill 1, as recorded


def test_a_malformed_keying_is_refused_naming_it():
    data = {"policy": "global", "candidates": ["a"], "fallback": 0, "table": [], "keying": {"capture": [[1]]}}
    with pytest.raises(ValueError, match="keying"):
        policies.from_dict(data)


def test_an_unknown_category_against_a_fixed_order_is_refused():
    with pytest.raises(ValueError, match="not among"):
        ATTENTION.category_codes(pd.DataFrame({"phase": ["verify"]}))
