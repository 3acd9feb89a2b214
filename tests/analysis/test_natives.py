"""Natives can win (issue 33, item 3): the global kernel, the oracle, the policies and what ships are
chosen among every candidate that passed correctness, natives included; our best kernel against
each native stays reported; `headroom recommend` and the report say which native ships and how far
ours is behind it, or, where ours ships, each native's speedup."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from headroom import dispatch
from headroom.core import recommend as text
from headroom.decide import figures
from headroom.report import ship
from headroom.report.sections import answer
from tests import analysis_sets as S
from tests.recommendation_sets import FAST, recommend

NATIVE = "native-sdpa-cudnn"
SEQ = "ACBCAC" * 8


def _ours(k, t, f, r, m, i):
    """Ours: fused 20% faster, tile 0 best by 5%, t0-fused the global kernel among ours."""
    noise = 1.0 + 0.002 * np.random.default_rng(zlib.crc32(f"{r}|{i}|{t}|{f}".encode())).standard_normal()
    return S.BASE_US[k] * (0.8 if f else 1.0) * (1.05 if t else 1.0) * noise


def _row(d, figure, mode="graph"):
    return d[(d["mode"] == mode) & (d["figure"] == figure)].iloc[0]


def _decode_native(key):  # the native (x t0-unfused, so x 1.25 t0-fused) fastest on decodes only
    return 0.6 if S.SHAPES[key][0] == "decode" else 1.5


def test_a_native_fastest_everywhere_is_the_global_kernel_and_ships(tmp_path):
    path = tmp_path / "dispatch.json"
    tr, d, table, content = recommend(_ours, SEQ, native=lambda key: 0.7, out=path)
    gap = _row(d, "gap_to_oracle")
    assert (gap["kernel"], gap["runs_agree"]) == (NATIVE, 3)  # the global kernel, over every candidate
    assert gap["estimate"] == pytest.approx(0.0, abs=1e-9)  # the oracle picks it everywhere too
    vs = _row(d, f"kernel_vs_{NATIVE}")  # our best kernel against it: 0.7 x 1.25 of its latency
    assert vs["kernel"] == "t0-fused" and vs["estimate"] == pytest.approx(0.875, rel=0.01)
    assert _row(d, "kernel_vs_best_unfused")["kernel"] == "t0-fused"
    r = table.iloc[0]
    assert (r["ship"], r["kernel"], r["our_kernel"], r["backend"], r["tile"]) == (
        "kernel", NATIVE, "t0-fused", "sdpa-cudnn", -1
    )  # fmt: skip
    assert r["natives_shipped"] == NATIVE and r["faster_native"] == NATIVE
    chosen = dispatch.load(path, mode="graph").choose(**tr.iloc[0].to_dict())
    assert (chosen.id, chosen.native, chosen.tile, chosen.rope) == (NATIVE, True, -1, "unfused")
    said = text.lines(table, str(d["reason"].iloc[0]))
    assert said[1].startswith(
        f"Ship: graph mode: {NATIVE}, PyTorch's cuDNN SDPA backend, after the standalone RoPE kernel (3/3"
    )
    assert "; our best kernel, t0-fused, runs at 0.87" in said[1] and "its speed" in said[1]
    assert said[2].startswith("How sure: graph mode: our best kernel t0-fused: ")
    (x,) = ship.what_to_ship(table, None, None)
    line = answer.ship_line(x)
    assert (
        line.startswith(f"Ship {NATIVE} (PyTorch's cuDNN SDPA backend")
        and "Our best kernel, t0-fused" in line
    )
    assert "But" not in line


def test_a_native_fastest_on_some_shapes_is_the_oracles_pick_there_and_a_policy_routes_to_it(tmp_path):
    """Decodes want the native, prefills ours: the gap to the oracle exists only with the native in
    the candidate set (ours alone is flat across shapes), one kernel per phase captures it, and the
    table routes decodes to the native."""
    path = tmp_path / "dispatch.json"
    tr, d, table, content = recommend(_ours, SEQ, native=_decode_native, out=path)
    gap = _row(d, "gap_to_oracle")
    assert gap["kernel"] == "t0-fused" and gap["ci_low"] > 1.0  # ours is global; the oracle takes the native
    assert (d["verdict"].iloc[0], d["reason_code"].iloc[0]) == ("stop", "phase-split")
    r = table.iloc[0]
    assert (r["ship"], r["kernel"], r["our_kernel"], r["natives_shipped"]) == (
        "phase-pair", "t0-fused", "t0-fused", NATIVE
    )  # fmt: skip
    table_ = dispatch.load(path, mode="graph")
    for shape in tr.to_dict("records"):
        want = NATIVE if shape["phase"] == "decode" else "t0-fused"
        assert table_.choose(**shape).id == want, shape
    assert "it routes shapes to native-sdpa-cudnn" in text.lines(table, "Stop.")[1]
    (x,) = ship.what_to_ship(table, None, None)
    assert "it routes shapes to native-sdpa-cudnn" in answer.ship_line(x)


def test_where_ours_is_fastest_it_ships_and_each_native_is_stated():
    tr, d, table, _ = recommend(_ours, SEQ, native=lambda key: 1.3)
    assert _row(d, "gap_to_oracle")["kernel"] == "t0-fused"
    assert _row(d, f"kernel_vs_{NATIVE}")["estimate"] == pytest.approx(1.625, rel=0.01)
    r = table.iloc[0]
    assert (r["kernel"], r["our_kernel"], r["natives_shipped"], r["faster_native"]) == (
        "t0-fused", "t0-fused", "", ""
    )  # fmt: skip
    said = text.lines(table, "Stop.")
    assert said[1] == "Ship: graph mode: t0-fused (3/3 runs agree, 100 µs per call)"
    assert "over the best unfused" in said[2] and f"over {NATIVE}" in said[2] and "our best" not in said[2]


def test_natives_are_not_shipped_on_eager_timings_that_include_the_host():
    """Eager timings recorded back to back: a native's host path against ours is no kernel comparison,
    so it competes for nothing there, and recommend states no native."""
    tr = S.trace(SEQ)
    tm = S.with_native(S.timings(tr, _ours, modes=("eager",)), lambda key: 0.7)
    tm = tm.assign(timing_method="cuda_events")
    figs = figures.study_figures(tr, tm, **FAST)
    assert set(figs.loc[figs["figure"] == "gap_to_oracle", "kernel"]) == {"t0-fused"}
    vs = figs[figs["figure"] == f"kernel_vs_{NATIVE}"]
    assert len(vs) and (vs["estimate"] < 1).all()  # reported, as before: the native is faster there


def test_the_fusion_arms_stay_ours():
    tr = S.trace(SEQ)
    tm = S.with_native(S.timings(tr, _ours, modes=("graph",)), lambda key: 0.7)
    figs = figures.study_figures(tr, tm, **FAST).set_index("figure")
    # global unfused / global fused among ours: the native (unfused, RoPE apart) is in neither arm
    assert figs.loc["fusion_speedup", "estimate"] == pytest.approx(1.25, rel=0.01)


def test_every_native_backend_of_the_attention_family_has_words():
    from headroom.core.names import NATIVE_WORDS
    from headroom.families.attention.candidates import NATIVE_BACKENDS, build

    tile = {"block_m": 64, "block_n": 32, "num_warps": 4, "num_stages": 2}
    backends = set(build([tile], ["unfused"], NATIVE_BACKENDS)["backend"]) - {"triton"}
    assert backends <= set(NATIVE_WORDS), sorted(backends - set(NATIVE_WORDS))
