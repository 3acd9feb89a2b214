"""Bit identity of attention's runner across a code move: what every attention stage times, before
and after, on the GPU (issue 32: the runner moved from headroom/measure to headroom/families/attention).

    python3 tools/runner_identity.py write OUT.json [--root DIR]
    python3 tools/runner_identity.py --compare A.json B.json

`write` imports the runner, the candidates table and `rotate_k` from DIR (a tree of this repository;
the current one by default) wherever that tree keeps them (headroom.families.attention or, before the
move, headroom.measure), builds the default study's candidates (config/config.yaml read from DIR) and
runs every one on SHAPES — a prefill, a chunk over a cache, a split-KV decode — on q, k, v drawn here
from fixed seeds (bfloat16, the default partition) with the tree's own RoPE tables. It records per
candidate and shape the BLAKE3 of the output's bytes and the CUDA kernels one warm call launches, in
order (torch.profiler). `--compare` exits 1 naming every difference, 0 when all agree. tools/bit_identity.py
checks the kernels' IR; this checks the Python path the stages call them through.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from functools import partial
from pathlib import Path
from types import SimpleNamespace

# (phase, batch, q_len, kv_len)
SHAPES = [("prefill", 1, 512, 512), ("prefill", 1, 256, 1024), ("decode", 8, 1, 2048)]
SEED = 20261203


def _module(name: str):
    """`name` from headroom.families.attention, else from headroom.measure (the tree before the move)."""
    for package in ("headroom.families.attention", "headroom.measure"):
        try:
            return importlib.import_module(f"{package}.{name}")
        except ModuleNotFoundError:
            continue
    raise SystemExit(
        f"runner_identity: neither headroom.families.attention.{name} nor headroom.measure.{name}"
    )


def launches(fn) -> list[str]:
    """The CUDA kernels one call of ``fn`` launches, in order (after a warm-up call: compiles
    excluded). tests/families/test_attention_family_gpu.py reads launches with it too."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = sorted(
        (e for e in prof.events() if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start
    )
    return [e.name for e in events]


def write(out: Path, root: Path) -> None:
    import torch
    import yaml
    from blake3 import blake3

    sys.path.insert(0, str(root))
    runner, candidates, inputs = _module("runner"), _module("candidates"), _module("inputs")
    cfg = yaml.safe_load((root / "config" / "config.yaml").read_text())
    table = candidates.build(
        cfg["tiles"],
        cfg["rope"],
        cfg["native_candidates"],
        int(cfg["generation"]),
        bool(cfg["varlen_decode"]),
    )
    p = cfg["partition"]
    hq, hkv, d, dtype = int(p["heads_q"]), int(p["heads_kv"]), int(p["head_dim"]), str(p["dtype"])
    cases = {}
    for phase, b, sq, skv in SHAPES:
        row = SimpleNamespace(
            phase=phase, batch=b, q_len=sq, kv_len=skv, heads_q=hq, heads_kv=hkv, head_dim=d
        )
        gen = torch.Generator(device="cuda").manual_seed(SEED + sq + skv)
        q, k, v = (
            torch.randn(size, generator=gen, device="cuda", dtype=torch.float32).to(getattr(torch, dtype))
            for size in ((b, hq, sq, d), (b, hkv, skv, d), (b, hkv, skv, d))
        )
        cos, sin = runner.tables(skv, d, dtype, float(p["rope_base"]), "cuda")
        for cand in table.itertuples(index=False):
            key = f"{cand.candidate}|{phase}-{b}x{sq}x{skv}"
            try:
                fn = runner.runner(cand, cos, sin, inputs.rotate_k(row), None)
                o = fn(q, k, v)
                torch.cuda.synchronize()
            except Exception as exc:  # a native with no kernel for the shape: the same refusal both sides
                cases[key] = {"out": f"raised {type(exc).__name__}", "launches": []}
                continue
            cases[key] = {
                "out": blake3(o.contiguous().view(torch.uint8).cpu().numpy().tobytes()).hexdigest(),
                "launches": launches(partial(fn, q, k, v)),
            }
    meta = {"root": str(root), "runner": runner.__name__, "torch": torch.__version__}
    out.write_text(json.dumps({"meta": meta, "cases": cases}, indent=1, sort_keys=True))
    print(f"runner_identity: {len(cases)} cases of {runner.__name__} -> {out}")


def compare(a: Path, b: Path) -> int:
    ca, cb = json.loads(a.read_text())["cases"], json.loads(b.read_text())["cases"]
    differ = [f"{k}: only in {a if k in ca else b}" for k in sorted(set(ca) ^ set(cb))]
    for k in sorted(set(ca) & set(cb)):
        for field in ("out", "launches"):
            if ca[k][field] != cb[k][field]:
                differ.append(f"{k}: {field} differ ({ca[k][field]} vs {cb[k][field]})")
    for line in differ:
        print(line)
    same = len(set(ca) & set(cb)) - len({d.split(":")[0] for d in differ})
    print(f"{same} of {len(set(ca) | set(cb))} cases identical (outputs and launches)")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"))
    ap.add_argument("verb", nargs="?", choices=["write"])
    ap.add_argument("out", nargs="?", type=Path)
    ap.add_argument("--root", type=Path, default=Path.cwd())
    args = ap.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.verb != "write" or args.out is None:
        ap.error("write OUT.json, or --compare A.json B.json")
    write(args.out, args.root.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
