"""A family captured by a feature (issue 34 item 2): its deployment profile splits its calls by the
feature's capture limit (``captured`` in graph mode, ``uncaptured`` in eager), not by step kind, in
the figures, the verdict, the recommendation and dispatch.json; a family without ``captured_by``
keeps the step-kind profile; the bootstrap's strata stay the step kinds."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from headroom import dispatch
from headroom.analysis import recommendation
from headroom.core import defaults
from headroom.core.recommend import _label
from headroom.decide import decision, figures, measured
from headroom.policies.shapes import CAPTURE_SIZES, Keying
from headroom.report.family import FamilyView
from tests import analysis_sets as S
from tests import family_sets as F

#: The toy family captured by tokens up to 8 (its pad_to), so the capture split cuts across step kinds
SMALL_CAPTURE = [1, 2, 4, 8]
RECORD = {
    **F.RECORD,
    "features": {
        **F.RECORD["features"],
        "tokens": {**F.RECORD["features"]["tokens"], "pad_to": SMALL_CAPTURE},
    },
    "captured_by": "tokens",
}
KEYING = Keying.of_record(RECORD)


def _moe_like(captured: bool = True) -> Keying:
    """A keying with tokens padded to vLLM's capture sizes up to 512 (MoE's)."""
    tokens = {"kind": "int", "capture_fixed": True, "pad_to": list(CAPTURE_SIZES), "min": 1, "max": None}
    dtype = {"kind": "category", "capture_fixed": True, "pad_to": None, "min": None, "max": None}
    record = {
        "name": "moe",
        "features": {"tokens": tokens, "dtype": dtype},
        "feature_order": ["tokens", "dtype"],
    }
    return Keying.of_record({**record, "captured_by": "tokens"} if captured else record)


def _features(tokens, kinds) -> pd.DataFrame:
    return pd.DataFrame({"tokens": tokens, "dtype": "bfloat16", "step_kind": kinds})


def test_the_capture_limit_splits_the_calls_whatever_their_step():
    keying = _moe_like()
    assert keying.captured_by == "tokens" and keying.capture_limit == 512
    feats = _features([1, 7, 512, 513, 4096, 300], ["decode-only", "mixed", "mixed", "decode-only",
                                                      "prefill-only", "prefill-only"])  # fmt: skip
    parts = measured.part_of(feats, keying)
    assert parts.tolist() == ["captured", "captured", "captured", "uncaptured", "uncaptured", "captured"]
    # the bootstrap's strata stay the step kinds (the sampler's)
    assert measured.strata_of(feats).tolist() == [0, 1, 1, 0, 1, 1]
    assert measured.step_of(feats).tolist() == [
        "decode-only",
        "mixed",
        "mixed",
        "decode-only",
        "mixed",
        "mixed",
    ]
    # a family without captured_by: the parts are the step kinds
    plain = _moe_like(captured=False)
    assert plain.captured_by is None and plain.capture_limit is None
    assert measured.part_of(feats, plain).tolist() == measured.step_of(feats).tolist()
    assert measured.part_of(feats).tolist() == measured.step_of(feats).tolist()


def test_the_profile_is_fixed_for_a_captured_family_and_a_changed_deployment_is_refused():
    default = defaults.value("decision", "deployment")
    assert figures.deployment_profile(None, KEYING) == {"captured": "graph", "uncaptured": "eager"}
    assert figures.deployment_profile(default, KEYING) == {"captured": "graph", "uncaptured": "eager"}
    with pytest.raises(
        ValueError, match=r"^decision.deployment .*captured by tokens.*remove decision.deployment"
    ) as e:
        figures.deployment_profile({"decode-only": "graph", "mixed": "graph"}, KEYING)
    assert "\n" not in str(e.value)
    # without captured_by: the configured step kinds, as ever
    assert figures.deployment_profile(None, F.KEYING) == default
    assert figures.deployment_profile({"mixed": "graph"}, F.KEYING) == {"mixed": "graph"}
    assert figures.profile_words(KEYING) == "calls with tokens <= 8 in graph mode, larger ones in eager mode"
    assert figures.profile_words(F.KEYING) == "decode-only steps in graph mode, mixed steps in eager mode"


def test_a_record_whose_captured_by_names_no_padded_int_feature_is_one_line_naming_it():
    for name in ("hidden", "dtype", "nope"):  # an int without pad_to, a category, no such feature
        with pytest.raises(
            ValueError, match=f"^family 'toy': its record's captured_by '{name}' must name"
        ) as e:
            Keying.of_record({**F.RECORD, "captured_by": name})
        assert "\n" not in str(e.value)


def _trace() -> pd.DataFrame:
    """The toy family's trace with step kinds drawn apart from the token counts."""
    tr = F.trace()
    kinds = np.random.default_rng(3).choice(["decode-only", "mixed", "prefill-only"], size=len(tr))
    return tr.assign(step_kind=kinds)


@pytest.fixture(scope="module")
def captured():
    """(trace, decision, recommendation table, dispatch content) of the toy family captured by tokens."""
    tr = _trace()
    tm = F.timings(tr, 0.3)
    figs = figures.study_figures(tr, tm, None, train_fraction=0.5, seed=0, keying=KEYING, **F.FAST)
    d = decision.decide(figs, None, S.environment("cuda"), min_test_invocations=5, keying=KEYING)
    env = S.environment("cuda").assign(driver="580.1", torch="2.13.0", triton="3.6.0")
    table, content = recommendation.build(
        d, tr, tm, None, F.candidates(), S.calibration(), env,
        meta=F.META, policies={"train_fraction": 0.5, "seed": 0, **F.FAST},
        intermediate_ratio=3.5, keying=KEYING, family=RECORD,
    )  # fmt: skip
    return tr, d, table, content


def test_the_profile_rows_and_the_verdict_are_the_capture_parts(captured):
    tr, d, _, _ = captured
    profile = d[d["family"] == "profile"]
    assert set(profile["mode"]) == {"graph@captured", "eager@uncaptured"}
    assert not d["mode"].str.contains("decode-only|mixed").any()
    n_cap = int((tr["tokens"] <= 8).sum())
    invocations = profile.drop_duplicates("mode").set_index("mode")["invocations"]
    assert invocations.to_dict() == {"graph@captured": n_cap, "eager@uncaptured": len(tr) - n_cap}
    assert (
        "for the deployment profile (calls with tokens <= 8 in graph mode, larger ones in eager mode)"
        in (d["reason"].iloc[0])
    )
    assert "Per part: graph@captured:" in d["reason"].iloc[0] and "eager@uncaptured:" in d["reason"].iloc[0]


def test_a_part_with_too_few_test_invocations_is_reported_not_decided():
    tr = _trace()
    figs = figures.study_figures(
        tr, F.timings(tr, 0.3), None, train_fraction=0.5, seed=0, keying=KEYING, **F.FAST
    )
    tests = figs[figs["family"] == "profile"].drop_duplicates("mode").set_index("mode")["test_invocations"]
    floor = int(tests["eager@uncaptured"]) + 1  # the uncaptured part falls below it, the captured one not
    assert tests["graph@captured"] >= floor
    d = decision.decide(figs, None, S.environment("cuda"), min_test_invocations=floor, keying=KEYING)
    units = d.drop_duplicates("mode").set_index("mode")
    assert units.loc["eager@uncaptured", "mode_reason_code"] == "too-few-invocations"
    assert units.loc["graph@captured", "mode_reason_code"] != "too-few-invocations"
    assert "not decided: eager@uncaptured (too-few-invocations)" in d["reason"].iloc[0]


def test_the_recommendation_and_dispatch_json_ship_per_capture_part(captured, tmp_path):
    tr, d, table, content = captured
    assert set(table["scope"]) == {"eager", "graph", "graph@captured", "eager@uncaptured"}
    assert content["profile"] == {"captured": "graph@captured", "uncaptured": "eager@uncaptured"}
    assert content["family"]["captured_by"] == "tokens"
    assert content["family"]["features"]["tokens"]["pad_to"] == SMALL_CAPTURE
    for entry in content["scopes"].values():  # each policy's keys carry it, as the table's record
        if "keying" in entry["policy"]:
            assert Keying.from_dict(entry["policy"]["keying"]) == KEYING
    path = tmp_path / "dispatch.json"
    path.write_text(json.dumps(content, allow_nan=False))
    loaded = dispatch.load(path)
    shape = {"hidden": 512, "dtype": "float16"}
    for tokens, scope in ((1, "graph@captured"), (8, "graph@captured"), (9, "eager@uncaptured"),
                          (4000, "eager@uncaptured")):  # fmt: skip
        for step in ("decode-only", "mixed", None):  # the step does not route it
            call = {**shape, "tokens": tokens, **({"step": step} if step else {})}
            assert loaded.scope_of(call) == scope
        assert loaded.choose(**shape, tokens=tokens).id == loaded.policy(scope).lookup(
            {**shape, "tokens": tokens}
        )
    assert loaded.features()[0] == "tokens"
    with pytest.raises(dispatch.DispatchError, match="routes by `tokens`"):
        loaded.choose(**shape, step="decode-only")
    bad = {**content, "family": {**content["family"], "captured_by": "hidden"}}
    path.write_text(json.dumps(bad, allow_nan=False))
    with pytest.raises(
        dispatch.DispatchError, match="field family: family 'toy': its record's captured_by 'hidden'"
    ):
        dispatch.load(path)


def test_a_family_without_captured_by_keeps_the_step_kind_profile():
    tr, d, table, content = F.recommend()
    assert set(d.loc[d["family"] == "profile", "mode"]) == {"graph@decode-only", "eager@mixed"}
    assert "decode-only steps in graph mode, mixed steps in eager mode" in d["reason"].iloc[0]
    assert content["profile"] == {"decode-only": "graph@decode-only", "mixed": "eager@mixed"}
    assert "captured_by" not in content["family"]
    assert not any("captured_by" in e["policy"].get("keying", {}) for e in content["scopes"].values())


def test_the_words_name_calls_for_capture_parts():
    assert _label("graph@captured") == "captured calls (graph)"
    assert _label("eager@uncaptured") == "uncaptured calls (eager)"
    assert _label("graph@decode-only") == "decode-only steps (graph)"
    view = FamilyView.of(RECORD)
    assert view.keying == KEYING
    assert "calls with tokens <= 8 replay CUDA graphs and larger ones run eager" in view.headline()
    assert "replay CUDA graphs" not in FamilyView.of(F.RECORD).headline()
