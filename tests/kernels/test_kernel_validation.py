"""Every invalid input raises ValueError naming the argument, before any kernel launches."""

from __future__ import annotations

import dataclasses
import importlib

import pytest
import torch
from kernel_helpers import DEVICE, DTYPES, random_qkv

import kernels
from kernels import Tile, attention, rope, rope_tables

TILE = Tile(16, 16, 4, 2)


class _NoLaunch:
    """Stands in for a Triton kernel: indexing it (the launch syntax) fails the test."""

    def __getitem__(self, grid):
        raise AssertionError("a kernel was launched before the input was rejected")


@pytest.fixture(autouse=True)
def no_launch(monkeypatch):
    # every launcher module of both generations (the package re-exports functions named like
    # some modules: fetch the modules themselves)
    launchers = {
        "kernels.gen1.attention": ("prefill_kernel", "decode_kernel", "reduce_kernel"),
        "kernels.gen1.rope": ("rope_kernel",),
        "kernels.prefill": ("prefill2_kernel",),
        "kernels.decode": ("decode_kernel", "reduce_kernel"),
        "kernels.rope": ("rope_kernel",),
    }
    for module, names in launchers.items():
        for name in names:
            monkeypatch.setattr(importlib.import_module(module), name, _NoLaunch())


def good(q_len=4, kv_len=6, heads_q=4, heads_kv=2, head_dim=32, dtype=None):
    dtype = dtype or DTYPES[0]
    q, k, v = random_qkv(
        1, heads_q, heads_kv, q_len, kv_len, head_dim, dtype, torch.Generator().manual_seed(0)
    )
    cos, sin = rope_tables(kv_len, head_dim, device=DEVICE)
    return dict(q=q, k=k, v=v, cos=cos, sin=sin, tile=TILE, fused=True, rotate_k=True)


def expect(match, **changes):
    args = good()
    args.update(changes)
    with pytest.raises(ValueError, match=match):
        attention(args.pop("q"), args.pop("k"), args.pop("v"), args.pop("cos"), args.pop("sin"), **args)


def unsupported_dtype():
    return torch.bfloat16 if kernels.interpreted() else torch.float32


@pytest.mark.parametrize("name", ["q", "k", "v"])
def test_dtype(name):
    base = good()
    for dtype in (torch.float64, torch.int32, unsupported_dtype()):
        expect(
            rf"\b{name}\b.*dtype|dtype.*\b{name}\b" if name == "q" else name, **{name: base[name].to(dtype)}
        )


def test_mixed_dtypes_name_the_odd_one():
    base = good()
    other = DTYPES[1]
    expect(r"^k dtype", k=base["k"].to(other))
    expect(r"^v dtype", v=base["v"].to(other))


@pytest.mark.parametrize("head_dim", [16, 48, 96])
def test_head_dim(head_dim):
    args = good(head_dim=head_dim)
    with pytest.raises(ValueError, match="head_dim"):
        attention(args.pop("q"), args.pop("k"), args.pop("v"), args.pop("cos"), args.pop("sin"), **args)


def test_shape_mismatches():
    base = good()
    expect("^q must be 4-D", q=base["q"][0])
    expect("k shape .* differs from v shape", v=base["v"][:, :, :-1])
    expect("k batch", k=torch.cat((base["k"], base["k"])), v=torch.cat((base["v"], base["v"])))
    expect("k head_dim", k=base["k"][..., :16], v=base["v"][..., :16])
    expect("q must be a torch.Tensor", q=base["q"].tolist())


def test_heads_not_a_multiple():
    args = good(heads_q=3, heads_kv=2)
    with pytest.raises(ValueError, match=r"q heads \(3\) must be a multiple of k heads \(2\)"):
        attention(args.pop("q"), args.pop("k"), args.pop("v"), args.pop("cos"), args.pop("sin"), **args)


def test_fewer_keys_than_queries():
    args = good(q_len=7, kv_len=5)
    with pytest.raises(ValueError, match="Skv >= Sq"):
        attention(args.pop("q"), args.pop("k"), args.pop("v"), args.pop("cos"), args.pop("sin"), **args)


def test_device_mismatch():
    base = good()
    expect("k is on meta", k=base["k"].to("meta"))
    wrong = "cuda" if kernels.interpreted() else "cpu"
    if wrong == "cuda" and not torch.cuda.is_available():
        expect("q is on meta", q=base["q"].to("meta"))
    else:
        expect(f"q is on {wrong}", q=base["q"].to(wrong))
    expect("cos is on meta", cos=base["cos"].to("meta"))


def test_tables():
    base = good()
    expect("cos covers 5 positions but 6", cos=base["cos"][:5], sin=base["sin"][:5])
    expect(
        r"sin must have shape \(max_pos, head_dim // 2 = 16\)", sin=torch.cat((base["sin"], base["sin"]), -1)
    )
    expect("cos dtype", cos=base["cos"].double())


def test_tile_and_flags():
    expect("tile must be a kernels.Tile", tile=(16, 16, 4, 2))
    expect("tile must be a kernels.Tile", tile=dataclasses.asdict(TILE))
    expect("fused must be a bool", fused=1)
    expect("rotate_k must be a bool", rotate_k="yes")


def test_out_buffer():
    base = good()
    expect("out must have shape", out=torch.empty_like(base["q"])[:, :, :-1])
    expect("out dtype", out=torch.empty_like(base["q"], dtype=DTYPES[1]))


@pytest.mark.parametrize(
    "field,value",
    [
        ("block_m", 8),
        ("block_m", 48),
        ("block_n", 512),
        ("block_n", 64.0),
        ("num_warps", 3),
        ("num_warps", 32),
        ("num_stages", 0),
        ("num_stages", 9),
    ],
)
def test_bad_tile_fields(field, value):
    fields = dict(block_m=16, block_n=16, num_warps=4, num_stages=2)
    fields[field] = value
    with pytest.raises(ValueError, match=f"Tile.{field}"):
        Tile(**fields)


def test_tile_is_frozen_and_named():
    tile = Tile(128, 64, 8, 3)
    assert tile.name == "m128n64w8s3"
    with pytest.raises(dataclasses.FrozenInstanceError):
        tile.block_m = 64
    assert Tile.from_mapping({"block_m": 128, "block_n": 64, "num_warps": 8, "num_stages": 3}) == tile
    with pytest.raises(ValueError, match="tile must be a mapping"):
        Tile.from_mapping({"block_m": 128, "block_n": 64, "num_warps": 8})


def test_rope_inputs():
    x = good()["q"]
    cos, sin = rope_tables(8, 32, device=DEVICE)
    with pytest.raises(ValueError, match="^x must be a 4-D"):
        rope(x[0], cos, sin)
    with pytest.raises(ValueError, match="positions_offset"):
        rope(x, cos, sin, -1)
    with pytest.raises(ValueError, match="cos covers 8 positions but 9"):
        rope(x, cos, sin, 5)
    with pytest.raises(ValueError, match="x dtype"):
        rope(x.double(), cos, sin)
    with pytest.raises(ValueError, match="max_pos"):
        rope_tables(0, 32)
    with pytest.raises(ValueError, match="head_dim"):
        rope_tables(4, 31)


def test_mode_change_after_import_is_refused(monkeypatch):
    """Triton fixed the mode at import; flipping TRITON_INTERPRET later must not be ignored."""
    monkeypatch.setenv("TRITON_INTERPRET", "0" if kernels.interpreted() else "1")
    args = good()
    with pytest.raises(RuntimeError, match="before the first `import kernels`"):
        attention(args.pop("q"), args.pop("k"), args.pop("v"), args.pop("cos"), args.pop("sin"), **args)
