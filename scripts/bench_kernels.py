"""Kernel benchmark: every candidate (tile x fused/unfused) against torch SDPA on one GPU.

    PYTHONUNBUFFERED=1 python3 scripts/bench_kernels.py --out DIR [--tiles config|explore]

One process, one GPU, bfloat16, Hq=32, Hkv=8, D=128 (the study's partition). First checks every
candidate against the float64 reference on the GPU (NaN-poisoned output, odd lengths, the split
decode path); a candidate that fails or cannot compile is reported and not timed. Then times
prefill (causal, Sq = Skv, k rotated) and decode (Sq = 1, rotated cache) cases with
triton.testing.do_bench (median of repetitions, L2 flushed before each: cold-cache numbers), for:
  - each candidate with RoPE (fused: one launch; unfused: RoPE launches + attention),
  - each tile's attention alone on pre-rotated inputs ("attn-only", RoPE skipped),
  - torch SDPA with each backend that runs (cuDNN, flash, efficient; enable_gqa=True; no RoPE).
Writes DIR/bench.json (rows + environment), DIR/bench.csv and DIR/bench.md, and prints the
Markdown. TFLOP/s counts causal FLOPs (4 * D per visible query-key pair); decode GB/s counts the
K and V bytes read once.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import math
import platform
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HEADS_Q, HEADS_KV, HEAD_DIM = 32, 8, 128
DTYPE = torch.bfloat16
PREFILL = [(1, 512), (1, 2048), (1, 8192), (4, 2048), (8, 1024)]  # (batch, seq)
DECODE = [(b, kv) for b in (1, 16, 64) for kv in (2048, 8192, 32768)]  # (batch, kv_len)
BF16_TOL = (2e-2, 6e-2)  # (rel, abs): config correctness.tolerances.bfloat16
# Extra tiles tried when choosing the study's five (--tiles explore|both).
EXPLORE_TILES = [(128, 64, 8, 4), (64, 64, 4, 4), (128, 64, 4, 3)]


def study_tiles():
    import yaml

    cfg = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "config.yaml").read_text())
    return [(t["block_m"], t["block_n"], t["num_warps"], t["num_stages"]) for t in cfg["tiles"]]


def pairs_visible(q_len: int, kv_len: int) -> int:
    """Query-key pairs under the bottom-right causal mask: query i sees i + (Skv - Sq) + 1 keys."""
    return q_len * (q_len + 1) // 2 + q_len * (kv_len - q_len)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--tiles", default="config", choices=["config", "explore", "both"])
    ap.add_argument("--rep-ms", type=float, default=60.0)
    ap.add_argument("--warmup-ms", type=float, default=15.0)
    ap.add_argument(
        "--table-dtype",
        default="bfloat16",
        choices=["bfloat16", "float32"],
        help="dtype of the cos/sin tables (bfloat16: the activation dtype, as HF casts them)",
    )
    ap.add_argument(
        "--decode-waves",
        type=int,
        nargs="*",
        default=[],
        help="also time the first tile's decode with these DECODE_WAVES values",
    )
    ap.add_argument("--skip-sdpa", action="store_true")
    ap.add_argument(
        "--table-variant", action="store_true", help="also time fused prefill with float32 tables"
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="CPU dry run of the script under TRITON_INTERPRET=1: tiny shapes, float16, "
        "wall-clock timing; checks the script, measures nothing",
    )
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    import triton
    import triton.testing

    import kernels
    from kernels import Tile, attention, attention_unrotated, reference_attention, rope_tables

    global HEADS_Q, HEADS_KV, HEAD_DIM, DTYPE, PREFILL, DECODE, EXPLORE_TILES
    if args.smoke:
        if not kernels.interpreted():
            raise SystemExit("--smoke needs TRITON_INTERPRET=1")
        HEADS_Q, HEADS_KV, HEAD_DIM, DTYPE = 4, 2, 32, torch.float16
        PREFILL, DECODE = [(1, 40)], [(2, 100)]
        EXPLORE_TILES = [(16, 16, 4, 2), (32, 16, 4, 2)]
        dev = torch.device("cpu")
        sm_count, name = kernels._mode.sm_count(dev), "interpreter (smoke)"
    else:
        if kernels.interpreted() or not torch.cuda.is_available():
            raise SystemExit("bench_kernels.py needs a CUDA GPU and TRITON_INTERPRET unset")
        dev = torch.device("cuda")
        props = torch.cuda.get_device_properties(dev)
        sm_count, name = props.multi_processor_count, props.name
    attn_mod = sys.modules["kernels.attention"]
    env = {
        "device": name,
        "sm_count": sm_count,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if not args.smoke else None,
        "python": platform.python_version(),
        "date_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(sys.argv),
        "table_dtype": args.table_dtype,
        "timing": f"triton.testing.do_bench median, warmup {args.warmup_ms} ms, rep {args.rep_ms} ms, L2 flushed per rep",
    }
    print(json.dumps(env), flush=True)
    tiles_raw = {
        "config": study_tiles() if not args.smoke else EXPLORE_TILES,
        "explore": EXPLORE_TILES,
        "both": list(dict.fromkeys(study_tiles() + EXPLORE_TILES)),
    }[args.tiles]
    tiles = [Tile(*t) for t in tiles_raw]
    table_dtype = getattr(torch, args.table_dtype)
    gen = torch.Generator(device=dev).manual_seed(0)

    def rand(*shape):
        return torch.randn(shape, generator=gen, device=dev, dtype=torch.float32).to(DTYPE)

    rows: list[dict] = []

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    # -- correctness on the GPU, before any timing ----------------------------------------------
    checks = [("prefill", 2, 1000, 1000, True), ("decode", 3, 1, 5000, False), ("chunk", 1, 77, 3001, False)]
    if args.smoke:
        checks = [("prefill", 1, 33, 33, True), ("decode", 2, 1, 70, False), ("chunk", 1, 7, 50, False)]
    broken: dict[str, str] = {}
    for phase, batch, q_len, kv_len, rotate_k in checks:
        q, k, v = (
            rand(batch, HEADS_Q, q_len, HEAD_DIM),
            rand(batch, HEADS_KV, kv_len, HEAD_DIM),
            rand(batch, HEADS_KV, kv_len, HEAD_DIM),
        )
        cos, sin = rope_tables(kv_len, HEAD_DIM, dtype=table_dtype, device=dev)
        ref = reference_attention(q, k, v, cos, sin, rotate_k=rotate_k)
        for tile in tiles:
            for fused in (False, True):
                name = f"{tile.name}-{'fused' if fused else 'unfused'}"
                out = torch.full_like(q, float("nan"))
                try:
                    attention(q, k, v, cos, sin, tile=tile, fused=fused, rotate_k=rotate_k, out=out)
                    sync()
                except Exception as exc:  # compile/launch failure (e.g. OutOfResources)
                    broken.setdefault(tile.name, f"{type(exc).__name__}: {str(exc)[:160]}")
                    continue
                diff = out.double() - ref
                rel = float(diff.norm() / ref.norm())
                mabs = float(diff.abs().max())
                nans = int(out.isnan().sum())
                ok = nans == 0 and rel <= BF16_TOL[0] and mabs <= BF16_TOL[1]
                if not ok:
                    broken.setdefault(tile.name, f"{phase}: rel {rel:.2e} abs {mabs:.2e} nan {nans}")
                rows.append(
                    dict(
                        kind="check",
                        phase=phase,
                        batch=batch,
                        q_len=q_len,
                        kv_len=kv_len,
                        impl=name,
                        rel_err=rel,
                        max_abs_err=mabs,
                        nan_count=nans,
                        passed=ok,
                    )
                )
        del q, k, v, ref
    worst = max((r["rel_err"] for r in rows if r["kind"] == "check"), default=float("nan"))
    print(
        f"correctness: {sum(r['passed'] for r in rows if r['kind'] == 'check')} / "
        f"{sum(1 for r in rows if r['kind'] == 'check')} checks passed, worst rel_err {worst:.2e}; "
        f"broken tiles: {broken or 'none'}",
        flush=True,
    )
    tiles = [t for t in tiles if t.name not in broken]

    def bench(fn) -> float:
        if args.smoke:
            start = time.perf_counter()
            fn()
            return (time.perf_counter() - start) * 1e6
        return (
            triton.testing.do_bench(fn, warmup=args.warmup_ms, rep=args.rep_ms, return_mode="median") * 1e3
        )  # ms -> us

    def host_us(fn, calls=100) -> float:
        """Host time per call of back-to-back calls (the GPU keeps up, so this is launch cost)."""
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        elapsed = time.perf_counter() - start
        sync()
        return elapsed / calls * 1e6

    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = [
        ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION),
        ("sdpa-flash", SDPBackend.FLASH_ATTENTION),
        ("sdpa-efficient", SDPBackend.EFFICIENT_ATTENTION),
    ]

    def time_case(phase, batch, q_len, kv_len):
        rotate_k = phase == "prefill"
        q = rand(batch, HEADS_Q, q_len, HEAD_DIM)
        k, v = rand(batch, HEADS_KV, kv_len, HEAD_DIM), rand(batch, HEADS_KV, kv_len, HEAD_DIM)
        cos, sin = rope_tables(kv_len, HEAD_DIM, dtype=table_dtype, device=dev)
        flops = 4 * HEAD_DIM * batch * HEADS_Q * pairs_visible(q_len, kv_len)
        kv_bytes = 2 * k.numel() * k.element_size()
        out = torch.empty_like(q)
        qr = kernels.rope(q, cos, sin, kv_len - q_len)
        kr = kernels.rope(k, cos, sin, 0) if rotate_k else k
        fns = []
        for tile in tiles:
            for fused in (True, False):
                fns.append(
                    (
                        f"{tile.name}-{'fused' if fused else 'unfused'}",
                        "triton",
                        lambda t=tile, f=fused: attention(
                            q, k, v, cos, sin, tile=t, fused=f, rotate_k=rotate_k, out=out
                        ),
                    )
                )
            fns.append(
                (
                    f"{tile.name}-attn-only",
                    "attn-only",
                    lambda t=tile: attention_unrotated(qr, kr, v, tile=t, out=out),
                )
            )
        if phase == "prefill" and args.table_variant and tiles:
            cos32, sin32 = rope_tables(kv_len, HEAD_DIM, dtype=torch.float32, device=dev)
            for tile in tiles:
                fns.append(
                    (
                        f"{tile.name}-fused-f32tables",
                        "variant",
                        lambda t=tile: attention(
                            q, k, v, cos32, sin32, tile=t, fused=True, rotate_k=True, out=out
                        ),
                    )
                )
        if phase == "decode" and args.decode_waves and tiles:
            for waves in args.decode_waves:

                def run(w=waves, t=tiles[0]):
                    saved = attn_mod.DECODE_WAVES
                    attn_mod.DECODE_WAVES = w
                    try:
                        attention(q, k, v, cos, sin, tile=t, fused=True, rotate_k=False, out=out)
                    finally:
                        attn_mod.DECODE_WAVES = saved

                fns.append((f"{tiles[0].name}-fused-waves{waves}", "variant", run))
        if not args.skip_sdpa and not args.smoke:
            for name, backend in backends:

                def sdpa(b=backend):
                    with sdpa_kernel([b]):
                        return torch.nn.functional.scaled_dot_product_attention(
                            qr, kr, v, is_causal=q_len > 1, enable_gqa=True
                        )

                fns.append((name, "sdpa", sdpa))
        for name, impl, fn in fns:
            row = dict(
                kind="time", phase=phase, batch=batch, q_len=q_len, kv_len=kv_len, impl=name, family=impl
            )
            try:
                fn()
                sync()
                us = bench(fn)
                row.update(median_us=us, tflops=flops / us / 1e6, gbps=kv_bytes / us / 1e3, status="ok")
                if phase == "decode" and not args.smoke:
                    # launch-bound shapes: the host cost of one call, and the GPU time alone
                    try:
                        row["host_us"] = host_us(fn)
                        row["graph_us"] = (
                            triton.testing.do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3
                        )
                    except Exception as exc:
                        row["graph_status"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
            except Exception as exc:
                row.update(status=f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
            rows.append(row)
        splits = (
            kernels.decode_split_plan(batch * HEADS_KV, kv_len, sm_count)[0] if phase == "decode" else None
        )
        done = [
            r
            for r in rows
            if r["kind"] == "time"
            and r["phase"] == phase
            and r["batch"] == batch
            and r["kv_len"] == kv_len
            and r["status"] == "ok"
        ]
        best = min(done, key=lambda r: r["median_us"]) if done else None
        print(
            f"{phase} B={batch} Sq={q_len} Skv={kv_len} splits={splits}: best {best and best['impl']} "
            f"{best and round(best['median_us'], 1)} us",
            flush=True,
        )
        del q, k, v, qr, kr, out

    t0 = time.perf_counter()
    for phase, cases in (
        ("prefill", [(b, s, s) for b, s in PREFILL]),
        ("decode", [(b, 1, kv) for b, kv in DECODE]),
    ):
        for batch, q_len, kv_len in cases:
            time_case(phase, batch, q_len, kv_len)
            (args.out / "bench_partial.json").write_text(json.dumps({"env": env, "rows": rows}))
            print(f"  [{time.perf_counter() - t0:.0f} s]", flush=True)

    summary = summarize(rows)
    (args.out / "bench.json").write_text(
        json.dumps({"env": env, "broken": broken, "rows": rows, "summary": summary}, indent=1)
    )
    keys = sorted({k for r in rows for k in r})
    with open(args.out / "bench.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    md = markdown(env, broken, rows, summary)
    (args.out / "bench.md").write_text(md)
    print(md, flush=True)


def summarize(rows):
    out = []
    cases = sorted(
        {(r["phase"], r["batch"], r["q_len"], r["kv_len"]) for r in rows if r["kind"] == "time"},
        key=lambda c: (c[0] != "prefill", c[1], c[3]),
    )
    for phase, batch, q_len, kv_len in cases:
        rs = [
            r
            for r in rows
            if r["kind"] == "time"
            and (r["phase"], r["batch"], r["q_len"], r["kv_len"]) == (phase, batch, q_len, kv_len)
            and r["status"] == "ok"
        ]

        def best(pred, rs=rs):
            sel = [r for r in rs if pred(r)]
            return min(sel, key=lambda r: r["median_us"]) if sel else None

        sdpa = best(lambda r: r["family"] == "sdpa")
        cand = best(lambda r: r["family"] == "triton")
        fused = best(lambda r: r["impl"].endswith("-fused"))
        unfused = best(lambda r: r["impl"].endswith("-unfused"))
        attn = best(lambda r: r["family"] == "attn-only")
        fused_tile = fused["impl"].rsplit("-", 1)[0] if fused else None
        same_attn = next((r for r in rs if r["impl"] == f"{fused_tile}-attn-only"), None)
        out.append(
            dict(
                phase=phase,
                batch=batch,
                q_len=q_len,
                kv_len=kv_len,
                best_sdpa=sdpa and sdpa["impl"],
                best_sdpa_us=sdpa and sdpa["median_us"],
                best_candidate=cand and cand["impl"],
                best_candidate_us=cand and cand["median_us"],
                best_fused_us=fused and fused["median_us"],
                best_unfused_us=unfused and unfused["median_us"],
                best_attn_only_us=attn and attn["median_us"],
                ratio_candidate_vs_sdpa=(sdpa["median_us"] / cand["median_us"]) if sdpa and cand else None,
                ratio_attn_only_vs_sdpa=(sdpa["median_us"] / attn["median_us"]) if sdpa and attn else None,
                fused_over_attn_only=(fused["median_us"] / same_attn["median_us"])
                if fused and same_attn
                else None,
                candidate_tflops=cand and cand["tflops"],
                candidate_gbps=cand and cand["gbps"],
                sdpa_tflops=sdpa and sdpa["tflops"],
                sdpa_gbps=sdpa and sdpa["gbps"],
            )
        )
    return out


def _f(x, fmt):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def markdown(env, broken, rows, summary):
    lines = [
        f"Device: {env['device']} ({env['sm_count']} SMs); torch {env['torch']}, triton {env['triton']}, "
        f"CUDA {env['cuda']}, cuDNN {env['cudnn']}; {env['date_utc']}; tables {env['table_dtype']}; {env['timing']}.",
        "",
        f"Broken tiles (not timed): {broken or 'none'}",
        "",
        "| phase | B | Sq | Skv | best SDPA | µs | best candidate | µs | cand/SDPA | attn-only/SDPA | fused/attn-only (same tile) | TFLOP/s or GB/s (cand / SDPA) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in summary:
        rate = (
            f"{_f(s['candidate_tflops'], '.0f')} / {_f(s['sdpa_tflops'], '.0f')} TFLOP/s"
            if s["phase"] == "prefill"
            else f"{_f(s['candidate_gbps'], '.0f')} / {_f(s['sdpa_gbps'], '.0f')} GB/s"
        )
        lines.append(
            f"| {s['phase']} | {s['batch']} | {s['q_len']} | {s['kv_len']} | {s['best_sdpa']} | {_f(s['best_sdpa_us'], '.1f')} | "
            f"{s['best_candidate']} | {_f(s['best_candidate_us'], '.1f')} | {_f(s['ratio_candidate_vs_sdpa'], '.3f')} | "
            f"{_f(s['ratio_attn_only_vs_sdpa'], '.3f')} | {_f(s['fused_over_attn_only'], '.3f')} | {rate} |"
        )
    dec = [s for s in summary if s["phase"] == "decode"]
    if any(r.get("graph_us") for r in rows):
        lines += [
            "",
            "Decode under CUDA Graph replay (GPU time without launch gaps; L2 not flushed) and host cost per eager call:",
            "",
            "| B | Skv | best candidate (graph) | µs | best SDPA (graph) | µs | cand/SDPA (graph) | host µs/call: best cand / cuDNN |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for s in dec:
            rs = [
                r
                for r in rows
                if r["kind"] == "time"
                and r["phase"] == "decode"
                and r["batch"] == s["batch"]
                and r["kv_len"] == s["kv_len"]
                and r.get("graph_us")
            ]
            c = min((r for r in rs if r["family"] == "triton"), key=lambda r: r["graph_us"], default=None)
            d = min((r for r in rs if r["family"] == "sdpa"), key=lambda r: r["graph_us"], default=None)
            cud = next((r for r in rs if r["impl"] == "sdpa-cudnn"), None)
            lines.append(
                f"| {s['batch']} | {s['kv_len']} | {c and c['impl']} | {_f(c and c['graph_us'], '.1f')} | {d and d['impl']} | "
                f"{_f(d and d['graph_us'], '.1f')} | {_f(d['graph_us'] / c['graph_us'] if c and d else None, '.3f')} | "
                f"{_f(c and c['host_us'], '.1f')} / {_f(cud and cud['host_us'], '.1f')} |"
            )
    impls = sorted({r["impl"] for r in rows if r["kind"] == "time"})
    cases = [(s["phase"], s["batch"], s["kv_len"]) for s in summary]
    lines += [
        "",
        "All timings (median µs):",
        "",
        "| impl | " + " | ".join(f"{p} B{b} {kv}" for p, b, kv in cases) + " |",
        "| --- |" + " --- |" * len(cases),
    ]
    for impl in impls:
        cells = []
        for p, b, kv in cases:
            r = next(
                (
                    r
                    for r in rows
                    if r["kind"] == "time"
                    and r["impl"] == impl
                    and (r["phase"], r["batch"], r["kv_len"]) == (p, b, kv)
                ),
                None,
            )
            cells.append(
                "-" if r is None else (_f(r.get("median_us"), ".1f") if r["status"] == "ok" else "fail")
            )
        lines.append(f"| {impl} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except Exception as exc:
        traceback.print_exc()
        raise SystemExit(1) from exc
