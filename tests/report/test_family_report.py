"""A kernel family's report (issue 32): read in the family's feature names, the attention-only
sections (natives, latency against kv_len, factorial, fusion sweep, plans, decoder-layer share)
saying in one line that they do not apply, no NaN table; and the cross-study page per family."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from headroom.analysis import family_roofline
from headroom.decide import policy_eval
from headroom.report import build as report
from headroom.report import family as hfamily
from headroom.report import studies
from headroom.report.ship import Ship
from tests import analysis_sets as S
from tests import family_sets as F

READ = [("results/toy/trace.parquet", "ab" * 32)]


def _inputs() -> dict:
    tr, d, rec, _ = F.recommend()
    tm = F.timings(tr, 0.3)
    tm = tm.assign(
        mean_us=tm["median_us"],
        p10_us=tm["median_us"],
        p90_us=tm["median_us"],
        rel_std_pct=1.0,
        timing_method="spin-events",
    )
    pe = policy_eval.evaluate(
        tr, tm, None, train_fraction=0.5, seed=0, keying=F.KEYING, bootstrap_resamples=100, random_draws=5
    )
    corr = pd.DataFrame(
        [
            {"candidate": c, "shape_key": k, "rel_err": 1e-4, "max_abs_err": 1e-3, "tolerance": 2e-3,
             "nan_count": 0, "unwritten_count": -1, "passed": True, "status": "passed"}
            for c in F.CONFIGS
            for k in tr["shape_key"].unique()
        ]
    )  # fmt: skip
    gs = S.graph_sweep(status="skipped").assign(
        reason="not applicable: the graph sweep measures attention's RoPE fusion; family tests.toy:FAMILY has none"
    )
    life = pd.DataFrame(
        [
            {"kind": "compile", "candidate": c, "value": 0.2, "unit": "s", "status": "ok", "reason": ""}
            for c in F.CONFIGS
        ]
    )
    cal = S.calibration()
    return {
        "decision": d,
        "recommendation": rec,
        "environment": S.environment("cuda"),
        "trace": tr,
        "candidates": F.candidates(),
        "correctness": corr,
        "portfolio": tm,
        "lifecycle": life,
        "graph_sweep": gs,
        "calibration": cal,
        "policy_eval": pe,
        "factorial": policy_eval.factorial(pe),
        "roofline": family_roofline.predict(tr, F.candidates(), cal, l2_bytes=50 * 2**20, timings=tm),
    }


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("family")
    inputs = _inputs()
    report.build(inputs, READ, out, title=report.defaults.value("report", "title"), family=F.RECORD)
    return inputs, (out / "report.md").read_text(), (out / "index.html").read_text()


def _section(md: str, title: str) -> str:
    return md.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_title_and_the_answer_name_the_family_and_its_keys(made):
    _, md, _ = made
    assert md.splitlines()[0] == "# headroom: is a shape-adaptive toy portfolio worth building?"
    answer = _section(md, "The answer: verdict, what to ship, what this study could detect")
    assert "Kernel family toy 2 (tests.toy:FAMILY; source BLAKE3 ffffffffffffffff)" in answer
    assert "declared features (tokens, hidden, dtype)" in answer
    captured = "dtype, tokens padded to its capture sizes (1, 2, 4, …, 64), hidden"
    assert (
        f"Ship the batch-keyed policy (keyed on family toy's capture-fixed features: {captured}) in graph "
        "(dispatch.json; fallback BLOCK2048-w8-s2)" in answer
    )
    assert (
        "What a saving is worth per decoder layer: does not apply to family toy: the decoder-layer model "
        "(attention plus its GEMMs) is attention's." in answer
    )
    assert "decoder layer's time" not in md  # no per-layer figure is stated


@pytest.mark.parametrize(
    "title",
    [
        "Our kernels against each native backend, per phase and mode",
        "Latency against kv_len and batch, per phase (one line per candidate family)",
        "Policy x fusion factorial",
        "Fusion speedup, eager vs CUDA Graph, per working-set regime",
    ],
)
def test_each_attention_only_section_says_in_one_line_it_does_not_apply(made, title):
    _, md, html = made
    body = _section(md, title).strip()
    assert body.startswith("Does not apply to family toy: ") and "\n" not in body
    assert "skipped:" not in body
    assert re.search(rf">{re.escape(title)}</a> \(does not apply\)</li>", html)


def test_the_sections_read_in_the_familys_terms_and_hold_no_nan(made):
    _, md, _ = made
    assert not re.search(r"\|\s*nan\s*\|", md, flags=re.IGNORECASE)  # no NaN cell in any table
    made_of = _section(md, "What the headroom is made of")
    assert "category split (one candidate per dtype value)" in made_of
    assert "candidate choice within category" in made_of and "fusion choice within phase" not in made_of
    decision = _section(md, "Decision: verdict per mode and the figures it was decided on")
    assert "RoPE in the attention kernel (fused, q_fused), free = both" not in decision
    assert "Fusion arms: does not apply to family toy" in decision
    assert "a table per exact shape (tokens, hidden, dtype): its net gain" in md
    assert "(batch, q_len, kv_len)" not in md
    lifecycle = _section(md, "Lifecycle ledger")
    assert "plan build per candidate and shape (generation 2): does not apply to family toy" in lifecycle
    correctness = _section(md, "Correctness")
    assert "unwritten count" not in correctness and not re.search(r"\| -\d", correctness)  # no sum of -1s
    surface = _section(md, "Latency surface (candidates x shapes)")
    assert all(c in surface for c in F.CONFIGS)
    policies = _section(md, "Policy gains")
    assert "| graph | free | batch-keyed |" in policies and "| graph | off |" not in policies


def test_the_roofline_is_the_familys_per_mode_and_candidate(made):
    _, md, _ = made
    roof = _section(md, "Roofline: predicted vs measured")
    assert "from what family toy says each shape costs" in roof
    assert "**measured / predicted**" in roof and "**Achieved bandwidth" in roof
    assert "Fusion saving split: does not apply to family toy" in roof


def test_an_attention_record_is_attentions_report(tmp_path):
    """family={'name': 'attention'} and no family give the same bytes: attention's report as it was."""
    from tests.report.test_report import _inputs as attention_inputs

    inputs = attention_inputs("interpret")
    a = report.build(inputs, READ, tmp_path / "a", title="t")
    b = report.build(inputs, READ, tmp_path / "b", title="t", family={"name": "attention"})
    for name in ("index.html", "report.md"):
        assert a[name].read_bytes() == b[name].read_bytes()
    assert "does not apply" not in a["report.md"].read_text()


def test_a_family_is_known_from_its_trace_column_without_a_record():
    tr = F.trace()
    assert hfamily.FamilyView.of(None, tr).name == "toy"
    assert hfamily.FamilyView.of(None, tr.assign(family="attention")) is None
    assert hfamily.FamilyView.of({"name": "attention"}, S.trace("AB")) is None
    fam = hfamily.FamilyView.of(None, tr)
    assert fam.policy("batch-keyed") == "keyed on family toy's declared features"  # no declarations read


# -- the cross-study page: per kernel family -----------------------------------------------------
def test_what_to_ship_is_said_per_family_and_deltas_stay_within_one():
    families = {"a1": "attention", "a2": "attention", "n1": "rmsnorm"}
    ships = {
        "a1": [Ship("graph", "t0-fused", 3, 3)],
        "a2": [Ship("graph", "t0-fused", 3, 3)],
        "n1": [Ship("graph", "BLOCK128-w1-s3", 3, 3)],
    }
    said = studies.ship_sentences(
        ships, pd.DataFrame(columns=["study", "mode", "run", "candidate", "us"]), families
    )
    assert said == [
        "Kernel family attention, graph mode: every study ships t0-fused (a1, a2).",
        "Kernel family rmsnorm, graph mode: every study ships BLOCK128-w1-s3 (n1).",
    ]

    def fig(estimate):
        return pd.DataFrame(
            [{"mode": "graph", "figure": "gap_to_oracle", "unit": "%", "estimate": estimate, "ci_low": estimate - 1,
              "ci_high": estimate + 1}]
        )  # fmt: skip

    dl = studies.deltas({"a1": fig(1.0), "n1": fig(5.0), "a2": fig(2.0)}, families)
    assert list(zip(dl["study"], dl["versus"], strict=True)) == [("a2", "a1")]
    assert np.isclose(dl["delta"].iloc[0], 1.0)
    assert studies._delta_text(dl.iloc[0:0], several_families=True)[0].startswith(
        "No two studies of the same kernel"
    )
    one = studies.ship_sentences({s: ships[s] for s in ("a1", "a2")}, pd.DataFrame(), {"a1": "attention"})
    assert one == ["graph mode: every study ships t0-fused (a1, a2)."]  # one family: as it was
