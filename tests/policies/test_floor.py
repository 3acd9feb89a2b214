"""Policies as a floor (issue 21 item 3): the one lookup implementation, serialisable as plain data,
importing neither torch nor scikit-learn to look up, and the lifecycle timing it without the analysis."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from headroom import policies
from headroom.policies.fit import Train
from tests import analysis_sets as S

ROOT = Path(__file__).resolve().parents[2]
SEQ = ["A", "B", "C", "D", "A2", "C", "C", "D", "B", "A"] * 3


def _fitted(name: str):
    tr = S.trace(SEQ)
    us = np.random.default_rng(3).lognormal(0.0, 0.3, size=(len(tr), 4))
    policy = policies.make(name)
    if name == "random":
        policy.seed = 5
    return tr, policy.fit(Train(tr, us, ("a", "b", "c", "d"), clusters=3, seed=1))


@pytest.mark.parametrize("name", sorted(policies.REGISTRY))
def test_a_fitted_policy_survives_json_with_the_same_choice_for_every_shape(name):
    tr, policy = _fitted(name)
    loaded = policies.from_dict(json.loads(json.dumps(policy.to_dict(), allow_nan=False)))
    shapes = tr.to_dict("records") + [
        {**tr.iloc[2].to_dict(), "shape_key": "new", "batch": 77, "kv_len": 9999}
    ]
    assert type(loaded) is type(policy) and loaded.candidates == policy.candidates
    if name == "random":  # a seeded draw: the same sequence after the round trip
        policy.fit(Train(tr, np.ones((len(tr), 4)), policy.candidates))
    assert [loaded.lookup(s) for s in shapes] == [policy.lookup(s) for s in shapes]
    if name != "random":
        assert loaded.choose(tr).tolist() == policy.choose(tr).tolist()
        assert set(loaded.features) <= set(tr.columns)


@pytest.mark.parametrize(
    "data, says",
    [
        ({"candidates": ["a"]}, "a 'policy' name"),
        ({"policy": "bucketed", "candidates": ["a"], "fallback": 0}, r"missing \['table'\]"),
        ({"policy": "clustered", "candidates": ["a"], "fallback": 0, "table": []}, "missing"),
        ({"policy": "global", "candidates": ["a"], "fallback": 3, "table": []}, "out of range"),
        ({"policy": "global", "candidates": [], "fallback": 0, "table": []}, "no candidates"),
        ({"policy": "psychic", "candidates": ["a"], "fallback": 0, "table": []}, "unknown policy"),
    ],
)
def test_malformed_policy_data_is_refused_naming_what_is_wrong(data, says):
    with pytest.raises(ValueError, match=says):
        policies.from_dict(data)


def _modules_after(code: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"import sys; {code}; print(' '.join(sorted(sys.modules)))"],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.split()


def test_lookup_imports_neither_torch_nor_sklearn_nor_pandas():
    code = (
        "from headroom import policies; "
        "p = policies.from_dict({'policy': 'bucketed', 'candidates': ['a', 'b'], 'fallback': 0, "
        "'table': [['decode|q1|kv1024|b8', 1]]}); "
        "assert p.lookup({'phase': 'decode', 'q_len': 1, 'kv_len': 1000, 'batch': 8}) == 'b'"
    )
    loaded = _modules_after(code)
    assert not {"torch", "sklearn", "pandas", "scipy"} & set(loaded)


def test_the_lifecycle_times_policies_without_importing_the_analysis():
    loaded = _modules_after("import headroom.measure.lifecycle")
    assert "headroom.policies" in loaded
    assert not [m for m in loaded if m.startswith(("headroom.analysis", "headroom.decide"))]
