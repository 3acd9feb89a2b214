"""tools/bit_identity.py: what it hashes, what it strips, and how it compares (no kernel runs)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bit_identity", ROOT / "tools" / "bit_identity.py")
bit_identity = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bit_identity)


def test_cases_cover_every_candidate_of_every_generation_and_both_merges():
    tiles = len(yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["tiles"])
    keys = [c["key"] for c in bit_identity.cases()]
    assert len(keys) == len(set(keys)) == tiles * (2 * 4 + 3 * 5 + 2)
    assert {k.split("/")[3] for k in keys} == {"prefill", "chunk", "decode", "decode1", "varlen", "varlen1"}
    assert sum(k.startswith("g2/") and k.endswith("decode/in_kernel") for k in keys) == 3 * tiles
    assert sum(k.startswith("g3/varlen/") for k in keys) == 2 * tiles  # generation 3: every tile
    for shapes in bit_identity.SHAPES.values():
        assert shapes["chunk"][3] < shapes["chunk"][4] and shapes["decode"][3] == 1
    for shapes, lens in bit_identity.KV_LENS.items():  # ragged batches: one sequence shorter
        for shape, kv_lens in lens.items():
            batch, kv_len = bit_identity.SHAPES[shapes][shape][0], bit_identity.SHAPES[shapes][shape][4]
            assert len(kv_lens) == batch and max(kv_lens) == kv_len and min(kv_lens) < kv_len


def test_decode_shapes_split_and_do_not_split_as_named():
    """decode / varlen split the keys on both devices, decode1 / varlen1 never (SPLIT=False)."""
    from kernels import split

    gpu = (bit_identity.SM90_SMS, split.MIN_SPLIT_KEYS, split.SPLIT_ALIGN_KEYS)
    for device, (sm_count, min_keys, align) in (("cuda", gpu), ("cpu", (4, 16, 16))):  # cpu: kernels.mode
        for shape in ("decode", "decode1", "varlen", "varlen1"):
            batch, _, heads_kv, _, kv_len, _, _ = bit_identity.SHAPES[device][shape]
            programs = batch * heads_kv  # one row block: group * Sq = 2 rows
            splits, _ = split.decode_split_plan(
                programs, kv_len, sm_count, min_split_keys=min_keys, align_keys=align
            )
            assert (splits > 1) == (not shape.endswith("1")), (device, shape, splits)


def test_ir_is_hashed_without_locations_or_debug_info():
    ttgir = (
        '#loc = loc("/old/path/prefill.py":6:1)\n'
        '#loc7 = loc("x_ptr"(#loc))\n'
        'tt.func public @k(%x: !tt.ptr<f16> loc("x"(#loc))) {\n'
        "  %0 = tt.get_program_id x : i32 loc(callsite(#loc1 at #loc2))\n"
        "  %1 = ttg.local_alloc(%0) : i32 loc(#loc3)\n"
        "}\n"
    )
    stripped = bit_identity.strip_ttgir(ttgir)
    assert "loc(" not in stripped.replace("local_alloc(", "") and "/old/path" not in stripped
    assert "tt.func public @k(%x: !tt.ptr<f16>) {" in stripped and "tt.get_program_id x : i32\n" in stripped
    assert "ttg.local_alloc(%0) : i32\n" in stripped
    moved = ttgir.replace('/old/path/prefill.py":6', '/new/jit/prefill.py":9')
    assert bit_identity.strip_ttgir(moved) == stripped
    ptx = '.file 1 "/old/path/prefill.py"\n\t.loc 1 6 1\n\tmov.u32 %r1, %tid.x;\n.section\t.debug_abbrev\n\t{\n.b8 1\n\t}\n'
    assert bit_identity.strip_ptx(ptx).strip() == "mov.u32 %r1, %tid.x;"
    # LLVM's debug-scope labels go; branch targets and instructions stay
    labelled = "$L__tmp3:\n\tmov.u32 %r1, %tid.x;\n$L__BB0_2:\n\tbra.uni $L__BB0_2;\n"
    assert bit_identity.strip_ptx(labelled) == "\tmov.u32 %r1, %tid.x;\n$L__BB0_2:\n\tbra.uni $L__BB0_2;"


def _module_text(names: tuple[str, str, str], op: str = "arith.addi") -> str:
    a, b, c = names
    return (
        "module {\n"
        f"  tt.func public @k(%{a}: i32, %{b}: i32) {{\n"
        f"    %{c} = {op} %{a}, %{b} : i32\n"
        f"    %{c}_0 = arith.muli %{c}, %{a} : i32\n"
        "    tt.return\n"
        "  }\n"
        "}\n"
    )


def test_ttgir_hash_ignores_value_names_but_not_the_program():
    # Triton 3.9 prints SSA values under the source's names: renaming them is the same module
    first = bit_identity.renumber_ttgir(_module_text(("x_ptr", "stride_qb", "acc")))
    assert first == bit_identity.renumber_ttgir(_module_text(("q_strides.0", "arg7", "v")))
    assert "%stride_qb" not in first and "%acc" not in first and "tt.func public @k(" in first
    # another operation, or the operands in another order, is another module
    assert first != bit_identity.renumber_ttgir(_module_text(("x_ptr", "stride_qb", "acc"), "arith.subi"))
    swapped = _module_text(("x_ptr", "stride_qb", "acc")).replace(
        "%x_ptr, %stride_qb :", "%stride_qb, %x_ptr :"
    )
    assert first != bit_identity.renumber_ttgir(swapped)


def _record(tmp_path: Path, name: str, cases: dict) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"cases": cases}))
    return path


def test_compare_names_each_difference(tmp_path, capsys):
    case = {
        "out": "aa",
        "launches": [["prefill_kernel", [4, 1, 1]]],
        "ir": [{"kernel": "prefill_kernel", "ttgir": "t"}],
    }
    a = _record(tmp_path, "a.json", {"g1/fused/t0/prefill/default": case})
    assert (
        bit_identity.compare(a, _record(tmp_path, "b.json", {"g1/fused/t0/prefill/default": dict(case)})) == 0
    )
    assert "out 1/1, launches 1/1, ir 1/1" in capsys.readouterr().out
    other_ir = dict(case, ir=[{"kernel": "prefill_kernel", "ttgir": "u"}])
    extra = {"g1/fused/t0/prefill/default": other_ir, "g1/fused/t1/prefill/default": case}
    assert bit_identity.compare(a, _record(tmp_path, "c.json", extra)) == 1
    printed = capsys.readouterr().out
    assert "DIFFERS g1/fused/t0/prefill/default: ir differs" in printed
    assert "DIFFERS g1/fused/t1/prefill/default: only in" in printed
