"""Kernel benchmark: every candidate (tile x fused/unfused) against torch SDPA on one GPU.

    PYTHONUNBUFFERED=1 python3 scripts/bench_kernels.py --out DIR [--tiles config|explore]
    PYTHONUNBUFFERED=1 python3 scripts/bench_kernels.py --gen2 --out DIR [--rep-ms 40 --warmup-ms 10]

--gen2 is the generation-2 benchmark (gen2_main below): compiles every prefill config in parallel
subprocesses, checks them and the decode plans on the GPU against float64, measures Plan.run host
cost (CPU wall of HOST_CALLS back-to-back calls), then times the RoPE placements, prefill kernel
variants and decode (eager and CUDA Graph) beside generation 1 and SDPA; writes
DIR/bench_gen2.{json,csv,md}. Add --smoke under TRITON_INTERPRET=1 for a CPU dry run of either mode.
The rest of this docstring describes the generation-1 benchmark.

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
import concurrent.futures
import csv
import dataclasses
import datetime as dt
import json
import math
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import NamedTuple

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


SMOKE_SHAPE = (4, 2, 32, torch.float16)  # (heads_q, heads_kv, head_dim, dtype) of --smoke
SMOKE_PREFILL, SMOKE_DECODE = [(1, 40)], [(2, 100)]
SMOKE_EXPLORE_TILES = [(16, 16, 4, 2), (32, 16, 4, 2)]
# (phase, batch, q_len, kv_len, rotate_k) of generation 1's correctness checks, full size and --smoke
GEN1_CHECKS = [("prefill", 2, 1000, 1000, True), ("decode", 3, 1, 5000, False), ("chunk", 1, 77, 3001, False)]
GEN1_SMOKE_CHECKS = [("prefill", 1, 33, 33, True), ("decode", 2, 1, 70, False), ("chunk", 1, 7, 50, False)]
GEN1_SDPA = [  # (impl name, torch.nn.attention.SDPBackend member)
    ("sdpa-cudnn", "CUDNN_ATTENTION"),
    ("sdpa-flash", "FLASH_ATTENTION"),
    ("sdpa-efficient", "EFFICIENT_ATTENTION"),
]


@dataclasses.dataclass
class Bench:
    """What a benchmark run's phases share: its arguments, the device and problem shape, the seeded
    random source, the environment, the rows and broken configs found so far, and the helpers that
    time a callable on the device."""

    args: argparse.Namespace
    device: torch.device
    sm_count: int
    env: dict
    heads_q: int
    heads_kv: int
    head_dim: int
    dtype: torch.dtype
    gen: torch.Generator
    rows: list[dict] = dataclasses.field(default_factory=list)
    broken: dict[str, str] = dataclasses.field(default_factory=dict)
    t_start: float = 0.0  # when log() counts from

    @property
    def smoke(self) -> bool:
        return self.args.smoke

    @property
    def table_dtype(self) -> torch.dtype:
        return getattr(torch, self.args.table_dtype)

    def rand(self, *shape) -> torch.Tensor:
        return torch.randn(shape, generator=self.gen, device=self.device, dtype=torch.float32).to(self.dtype)

    def tables(self, seq: int, dtype: torch.dtype | None = None):
        """(cos, sin) RoPE tables for seq positions, in the --table-dtype unless dtype is given."""
        from kernels import rope_tables

        dtype = self.table_dtype if dtype is None else dtype
        return rope_tables(seq, self.head_dim, dtype=dtype, device=self.device)

    def prefill_tensors(self, batch: int, seq: int) -> dict:
        return _prefill_tensors(
            batch,
            seq,
            self.heads_q,
            self.heads_kv,
            self.head_dim,
            self.dtype,
            self.device,
            self.gen,
            self.table_dtype,
        )

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def log(self, msg: str) -> None:
        print(f"[{time.perf_counter() - self.t_start:5.0f} s] {msg}", flush=True)

    def bench(self, fn) -> float:
        """Median µs of fn (--smoke: the wall-clock of one call)."""
        if self.smoke:
            start = time.perf_counter()
            fn()
            return (time.perf_counter() - start) * 1e6
        import triton.testing

        ms = triton.testing.do_bench(
            fn, warmup=self.args.warmup_ms, rep=self.args.rep_ms, return_mode="median"
        )
        return ms * 1e3

    def host_us(self, fn, calls: int = 100, warm: bool = False) -> float:
        """Host time per call of back-to-back calls (the GPU keeps up, so this is launch cost);
        warm: one call before the clock starts."""
        if warm:
            fn()
        self.sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        elapsed = time.perf_counter() - start
        self.sync()
        return elapsed / calls * 1e6

    def graph_us(self, fn) -> float:
        """Median µs of fn under CUDA Graph replay."""
        import triton.testing

        return triton.testing.do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
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
        "--gen2",
        action="store_true",
        help="the generation-2 benchmark instead (plan/run host cost, RoPE placements, "
        "prefill variants; see gen2_main)",
    )
    ap.add_argument("--compile-one", default=None, help=argparse.SUPPRESS)
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="CPU dry run of the script under TRITON_INTERPRET=1: tiny shapes, float16, "
        "wall-clock timing; checks the script, measures nothing",
    )
    return ap


def main() -> None:
    args = _parser().parse_args()
    if args.compile_one:
        compile_one(args.compile_one)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    if args.gen2:
        gen2_main(args)
        return
    gen1_main(args)


def _device(smoke: bool) -> tuple[torch.device, int, str]:
    """(device, SM count, name) of the run: the CPU under the interpreter for --smoke, else the GPU."""
    import kernels

    if smoke:
        if not kernels.interpreted():
            raise SystemExit("--smoke needs TRITON_INTERPRET=1")
        dev = torch.device("cpu")
        return dev, kernels.mode.sm_count(dev), "interpreter (smoke)"
    if kernels.interpreted() or not torch.cuda.is_available():
        raise SystemExit("bench_kernels.py needs a CUDA GPU and TRITON_INTERPRET unset")
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    return dev, props.multi_processor_count, props.name


def _timing(args) -> str:
    return f"triton.testing.do_bench median, warmup {args.warmup_ms} ms, rep {args.rep_ms} ms, L2 flushed per rep"


def _start(args, timing: str, **extra) -> Bench:
    """Picks the device, prints the environment (extra goes before its timing) and returns the run's
    Bench, with --smoke's shape under --smoke."""
    import triton

    dev, sm_count, name = _device(args.smoke)
    env = {
        "device": name,
        "sm_count": sm_count,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "cudnn": None if args.smoke else torch.backends.cudnn.version(),
        "python": platform.python_version(),
        "date_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(sys.argv),
        "table_dtype": args.table_dtype,
        **extra,
        "timing": timing,
    }
    print(json.dumps(env), flush=True)
    shape = SMOKE_SHAPE if args.smoke else (HEADS_Q, HEADS_KV, HEAD_DIM, DTYPE)
    gen = torch.Generator(device=dev).manual_seed(0)
    return Bench(args, dev, sm_count, env, *shape, gen=gen)


def _errors(out, ref) -> tuple[float, float, int]:
    """(relative error, max absolute error, NaN count) of out against the float64 reference."""
    diff = out.double() - ref
    return float(diff.norm() / ref.norm()), float(diff.abs().max()), int(out.isnan().sum())


def _sdpa_fn(backend: str, q, k, v, causal: bool):
    """torch SDPA restricted to one backend (an SDPBackend member's name), GQA, no RoPE."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def fn():
        with sdpa_kernel([getattr(SDPBackend, backend)]):
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=causal, enable_gqa=True
            )

    return fn


def _write_outputs(ctx: Bench, stem: str, payload: dict, md: str) -> None:
    """Writes OUT/stem.json (payload), OUT/stem.csv (the rows) and OUT/stem.md (md), and prints md."""
    (ctx.args.out / f"{stem}.json").write_text(json.dumps(payload, indent=1))
    keys = sorted({k for r in ctx.rows for k in r})
    with open(ctx.args.out / f"{stem}.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        w.writerows(ctx.rows)
    (ctx.args.out / f"{stem}.md").write_text(md)
    print(md, flush=True)


def gen1_main(args) -> None:
    """The generation-1 benchmark (the module docstring): checks, then prefill and decode timings."""
    from kernels import Tile

    ctx = _start(args, _timing(args))
    explore = SMOKE_EXPLORE_TILES if args.smoke else EXPLORE_TILES
    tiles_raw = {
        "config": study_tiles() if not args.smoke else explore,
        "explore": explore,
        "both": list(dict.fromkeys(study_tiles() + explore)),
    }[args.tiles]
    tiles = _gen1_checks(ctx, [Tile(*t) for t in tiles_raw])
    prefill, decode = (SMOKE_PREFILL, SMOKE_DECODE) if args.smoke else (PREFILL, DECODE)
    t0 = time.perf_counter()
    for phase, cases in (
        ("prefill", [(b, s, s) for b, s in prefill]),
        ("decode", [(b, 1, kv) for b, kv in decode]),
    ):
        for batch, q_len, kv_len in cases:
            time_case(ctx, tiles, phase, batch, q_len, kv_len)
            (args.out / "bench_partial.json").write_text(json.dumps({"env": ctx.env, "rows": ctx.rows}))
            print(f"  [{time.perf_counter() - t0:.0f} s]", flush=True)
    summary = summarize(ctx.rows)
    payload = {"env": ctx.env, "broken": ctx.broken, "rows": ctx.rows, "summary": summary}
    _write_outputs(ctx, "bench", payload, markdown(ctx.env, ctx.broken, ctx.rows, summary))


def _gen1_checks(ctx: Bench, tiles: list) -> list:
    """Correctness on the device, before any timing: every tile fused and unfused against the float64
    reference (NaN-poisoned output, odd lengths, the split decode path). Adds check rows and broken
    tiles to ctx; returns the tiles that are not broken."""
    from kernels import reference_attention

    for phase, batch, q_len, kv_len, rotate_k in GEN1_SMOKE_CHECKS if ctx.smoke else GEN1_CHECKS:
        q, k, v = (
            ctx.rand(batch, ctx.heads_q, q_len, ctx.head_dim),
            ctx.rand(batch, ctx.heads_kv, kv_len, ctx.head_dim),
            ctx.rand(batch, ctx.heads_kv, kv_len, ctx.head_dim),
        )
        cos, sin = ctx.tables(kv_len)
        ref = reference_attention(q, k, v, cos, sin, rotate_k=rotate_k)
        case = dict(phase=phase, batch=batch, q_len=q_len, kv_len=kv_len)
        for tile in tiles:
            for fused in (False, True):
                _gen1_check(ctx, case, tile, fused, (q, k, v, cos, sin), ref, rotate_k)
        del q, k, v, ref
    checks = [r for r in ctx.rows if r["kind"] == "check"]
    worst = max((r["rel_err"] for r in checks), default=float("nan"))
    print(
        f"correctness: {sum(r['passed'] for r in checks)} / {len(checks)} checks passed, "
        f"worst rel_err {worst:.2e}; broken tiles: {ctx.broken or 'none'}",
        flush=True,
    )
    return [t for t in tiles if t.name not in ctx.broken]


def _gen1_check(ctx: Bench, case: dict, tile, fused: bool, qkv_cos_sin: tuple, ref, rotate_k: bool) -> None:
    """One tile, fused or not, on one check case: a check row, or the tile marked broken."""
    from kernels import attention

    out = torch.full_like(qkv_cos_sin[0], float("nan"))
    try:
        attention(*qkv_cos_sin, tile=tile, fused=fused, rotate_k=rotate_k, out=out)
        ctx.sync()
    except Exception as exc:  # compile/launch failure (e.g. OutOfResources)
        ctx.broken.setdefault(tile.name, f"{type(exc).__name__}: {str(exc)[:160]}")
        return
    rel, mabs, nans = _errors(out, ref)
    ok = nans == 0 and rel <= BF16_TOL[0] and mabs <= BF16_TOL[1]
    if not ok:
        ctx.broken.setdefault(tile.name, f"{case['phase']}: rel {rel:.2e} abs {mabs:.2e} nan {nans}")
    ctx.rows.append(
        dict(
            kind="check",
            **case,
            impl=f"{tile.name}-{'fused' if fused else 'unfused'}",
            rel_err=rel,
            max_abs_err=mabs,
            nan_count=nans,
            passed=ok,
        )
    )


def time_case(ctx: Bench, tiles: list, phase: str, batch: int, q_len: int, kv_len: int) -> None:
    """Times every candidate (and SDPA) on one prefill or decode case into ctx.rows; prints the best."""
    import kernels

    rotate_k = phase == "prefill"
    q = ctx.rand(batch, ctx.heads_q, q_len, ctx.head_dim)
    k, v = (
        ctx.rand(batch, ctx.heads_kv, kv_len, ctx.head_dim),
        ctx.rand(batch, ctx.heads_kv, kv_len, ctx.head_dim),
    )
    cos, sin = ctx.tables(kv_len)
    flops = 4 * ctx.head_dim * batch * ctx.heads_q * pairs_visible(q_len, kv_len)
    kv_bytes = 2 * k.numel() * k.element_size()
    t = dict(q=q, k=k, v=v, cos=cos, sin=sin, out=torch.empty_like(q))
    t["qr"] = kernels.rope(q, cos, sin, kv_len - q_len)
    t["kr"] = kernels.rope(k, cos, sin, 0) if rotate_k else k
    case = dict(phase=phase, batch=batch, q_len=q_len, kv_len=kv_len)
    for name, family, fn in _gen1_fns(ctx, tiles, case, t):
        ctx.rows.append(_gen1_time_row(ctx, case, name, family, fn, flops, kv_bytes))
    splits = (
        kernels.decode_split_plan(batch * ctx.heads_kv, kv_len, ctx.sm_count)[0]
        if phase == "decode"
        else None
    )
    done = [
        r
        for r in ctx.rows
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


def _gen1_fns(ctx: Bench, tiles: list, case: dict, t: dict) -> list[tuple]:
    """(impl, family, callable) timed on one case's tensors t: each tile fused, unfused and its
    attention alone, the --table-variant and --decode-waves variants, and SDPA's backends."""
    from kernels import attention, attention_unrotated

    a, out = (t["q"], t["k"], t["v"], t["cos"], t["sin"]), t["out"]
    rotate_k = case["phase"] == "prefill"
    fns = []
    for tile in tiles:
        for fused in (True, False):
            fns.append(
                (
                    f"{tile.name}-{'fused' if fused else 'unfused'}",
                    "triton",
                    lambda tl=tile, f=fused: attention(*a, tile=tl, fused=f, rotate_k=rotate_k, out=out),
                )
            )
        fns.append(
            (
                f"{tile.name}-attn-only",
                "attn-only",
                lambda tl=tile: attention_unrotated(t["qr"], t["kr"], t["v"], tile=tl, out=out),
            )
        )
    if case["phase"] == "prefill" and ctx.args.table_variant and tiles:
        cos32, sin32 = ctx.tables(case["kv_len"], dtype=torch.float32)
        for tile in tiles:
            fns.append(
                (
                    f"{tile.name}-fused-f32tables",
                    "variant",
                    lambda tl=tile: attention(
                        *a[:3], cos32, sin32, tile=tl, fused=True, rotate_k=True, out=out
                    ),
                )
            )
    if case["phase"] == "decode" and ctx.args.decode_waves and tiles:
        fns += _gen1_wave_fns(ctx, tiles[0], a, out)
    if not ctx.args.skip_sdpa and not ctx.smoke:
        causal = case["q_len"] > 1
        fns += [(name, "sdpa", _sdpa_fn(be, t["qr"], t["kr"], t["v"], causal)) for name, be in GEN1_SDPA]
    return fns


def _gen1_wave_fns(ctx: Bench, tile, a: tuple, out) -> list[tuple]:
    """tile's fused decode with each --decode-waves value in place of kernels.mode.DECODE_WAVES."""
    from kernels import attention

    attn_mod = sys.modules["kernels.mode"]
    fns = []
    for waves in ctx.args.decode_waves:

        def run(w=waves):
            saved = attn_mod.DECODE_WAVES
            attn_mod.DECODE_WAVES = w
            try:
                attention(*a, tile=tile, fused=True, rotate_k=False, out=out)
            finally:
                attn_mod.DECODE_WAVES = saved

        fns.append((f"{tile.name}-fused-waves{waves}", "variant", run))
    return fns


def _gen1_time_row(ctx: Bench, case: dict, name: str, family: str, fn, flops: int, kv_bytes: int) -> dict:
    """The time row of one callable: median µs and rates, and at decode the host cost per call and
    the CUDA Graph replay time (launch-bound shapes); the error where it fails."""
    row = dict(kind="time", **case, impl=name, family=family)
    try:
        fn()
        ctx.sync()
        us = ctx.bench(fn)
        row.update(median_us=us, tflops=flops / us / 1e6, gbps=kv_bytes / us / 1e3, status="ok")
        if case["phase"] == "decode" and not ctx.smoke:
            try:
                row["host_us"] = ctx.host_us(fn)
                row["graph_us"] = ctx.graph_us(fn)
            except Exception as exc:
                row["graph_status"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    except Exception as exc:
        row.update(status=f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
    return row


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


def _graph_decode_lines(rows, summary) -> list[str]:
    """Markdown: decode under CUDA Graph replay and the host cost per eager call, per decode case."""
    dec = [s for s in summary if s["phase"] == "decode"]
    lines = [
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
    return lines


def _timings_lines(rows, cases, impls) -> list[str]:
    """Markdown: each implementation's median µs per (phase, batch, kv_len) case ("fail" where it
    did not run, "-" where it was not timed)."""
    lines = [
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
    return lines


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
    if any(r.get("graph_us") for r in rows):
        lines += _graph_decode_lines(rows, summary)
    impls = sorted({r["impl"] for r in rows if r["kind"] == "time"})
    lines += _timings_lines(rows, [(s["phase"], s["batch"], s["kv_len"]) for s in summary], impls)
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------
# Generation 2 (--gen2): plan/run host cost, RoPE placements (q_fused), prefill kernel variants.
# Same problem (bfloat16, Hq=32, Hkv=8, D=128), same timing method as above.

GEN2_PREFILL = [(1, 2048), (1, 8192), (4, 2048), (8, 1024)]  # (batch, seq): the issue's targets
GEN2_DECODE = [(1, 2048), (1, 8192), (16, 2048), (16, 8192), (64, 8192)]  # (batch, kv_len)
GEN1_PREFILL_TILES = [(128, 64, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3)]  # gen-1 best at prefill
GEN2_TILES = [(128, 64, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3)]
GEN2_WIDE_TILES = [(256, 64, 8, 2), (256, 64, 16, 2)]  # BLOCK_M 256: half the K re-rotations
VARIANTS = {  # name -> Variant(tma, warp_specialize, pack_gqa)
    "ptr": (False, False, False),
    "tma": (True, False, False),
    "tma+ws": (True, True, False),
    "pack": (False, False, True),
    "tma+pack": (True, False, True),
}
DECODE_TILES = [(64, 128, 4, 2), (128, 32, 4, 4), (64, 64, 4, 3)]
HOST_CALLS = 2000
HOST_PREFILL_SEQ = 128  # small enough that the GPU keeps ahead of the host: launch cost only


def gen2_prefill_configs(smoke: bool) -> list[tuple]:
    """(tile, variant, what) compiled and timed; what: 'attn' (attention alone on rotated q/k; the
    unfused candidate's attention launch), 'q_fused', 'fused' (K re-rotated in the kernel), and
    generation 1's 'g1-attn', 'g1-fused' (its unfused candidate reuses g1-attn's kernel)."""
    tiles, wide, gen1 = GEN2_TILES, GEN2_WIDE_TILES, GEN1_PREFILL_TILES
    if smoke:
        tiles, wide, gen1 = [(32, 16, 4, 2)], [(64, 16, 4, 2)], [(32, 16, 4, 2)]
    out = [(t, v, w) for t in tiles for v in VARIANTS for w in ("attn", "q_fused")]
    out += [(t, v, w) for t in wide for v in ("ptr", "tma") for w in ("attn", "q_fused")]
    out += [(t, "ptr", "fused") for t in tiles[:1] + wide] + [(tiles[0], "pack", "fused")]
    out += [(t, None, w) for t in gen1 for w in ("g1-attn", "g1-fused")]
    return out


def config_name(tile, variant, what) -> str:
    from kernels import Tile

    name = Tile(*tile).name
    return f"{name}-{what}" if variant is None else f"{name}-{variant}-{what}"


def build_prefill(cfg, t: dict, device):
    """A no-argument callable for config cfg on tensors t (q, k, v un-rotated; qr, kr rotated;
    cos, sin, out), compiled on return. 'unfused' is built from an 'attn' config."""
    import kernels
    from kernels import Tile, gen1
    from kernels.launch import SLOTS, CompiledLaunch
    from kernels.prefill import prefill_launches

    tile_t, vname, what = cfg
    tile = Tile(*tile_t)
    variant = kernels.Variant(*VARIANTS[vname]) if vname else None
    q, k, v, cos, sin, out = (t[n] for n in ("q", "k", "v", "cos", "sin", "out"))
    if what == "attn":
        tensors = {"q": t["qr"], "k": t["kr"], "v": v, "out": out}
        if variant is None:
            made = gen1.attention_specs(tensors, tile, rotate_q=False, rotate_k=False, cos=None, sin=None)
        else:
            slots = {**SLOTS, "cos": None, "sin": None}
            made = prefill_launches(tensors, tile, variant, rotate_q=False, rotate_k=False, slots=slots)
        tensors.update(made.scratch)
        launches = [CompiledLaunch(spec, tensors, device) for spec in made.specs]
        return lambda: [launch(tensors) for launch in launches]
    if what in ("q_fused", "fused", "unfused"):
        p = kernels.plan(q, k, v, cos, sin, tile=tile, rope=what, rotate_k=True, variant=variant, out=out)
        return lambda: p.run(q, k, v, cos, sin, out)
    if what == "g1-attn":
        return lambda: kernels.attention_unrotated(t["qr"], t["kr"], v, tile=tile, out=out)
    fused = what == "g1-fused"
    return lambda: kernels.attention(q, k, v, cos, sin, tile=tile, fused=fused, rotate_k=True, out=out)


def _prefill_tensors(batch, seq, heads_q, heads_kv, head_dim, dtype, device, gen, table_dtype):
    import kernels

    def rand(*shape):
        return torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(dtype)

    q, k, v = (
        rand(batch, heads_q, seq, head_dim),
        rand(batch, heads_kv, seq, head_dim),
        rand(batch, heads_kv, seq, head_dim),
    )
    cos, sin = kernels.rope_tables(seq, head_dim, dtype=table_dtype, device=device)
    return dict(
        q=q,
        k=k,
        v=v,
        cos=cos,
        sin=sin,
        qr=kernels.rope(q, cos, sin, 0),
        kr=kernels.rope(k, cos, sin, 0),
        out=torch.empty_like(q),
    )


def compile_one(cfg_json: str) -> None:
    """Subprocess entry (--compile-one): compile one prefill config into Triton's disk cache, so
    the main process only loads it; prints one JSON line. Separate processes let the configs
    compile in parallel and keep a compiler crash from ending the benchmark."""
    import kernels  # noqa: F401  (fixes the Triton mode before any launch)

    cfg = json.loads(cfg_json)
    cfg = (tuple(cfg[0]), cfg[1], cfg[2])
    dev = torch.device("cuda")
    try:
        t = _prefill_tensors(
            1,
            256,
            HEADS_Q,
            HEADS_KV,
            HEAD_DIM,
            DTYPE,
            dev,
            torch.Generator(device=dev).manual_seed(0),
            torch.bfloat16,
        )
        build_prefill(cfg, t, dev)()
        torch.cuda.synchronize()
        print(json.dumps({"ok": True}))
    except Exception as exc:
        print(
            json.dumps(
                {
                    "ok": False,
                    "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}",
                }
            )
        )


class Gen2Sizes(NamedTuple):
    """Generation 2's timed shapes and host-cost calls (GEN2_SIZES, or GEN2_SMOKE_SIZES for --smoke)."""

    prefill: list  # (batch, seq)
    decode: list  # (batch, kv_len)
    decode_tiles: list
    host_calls: int
    host_seq: int  # prefill length of the host-cost plans
    host_kv: int  # decode kv_len of the host-cost calls


GEN2_SIZES = Gen2Sizes(GEN2_PREFILL, GEN2_DECODE, DECODE_TILES, HOST_CALLS, HOST_PREFILL_SEQ, 2048)
GEN2_SMOKE_SIZES = Gen2Sizes([(1, 40)], [(2, 100)], [(16, 16, 4, 2)], 3, 20, 100)
GEN2_SMOKE_TILE = (32, 16, 4, 2)  # --smoke's stand-in for GEN2_TILES[0] and GEN1_PREFILL_TILES[0]
GEN2_SDPA = [("sdpa-cudnn", "CUDNN_ATTENTION"), ("sdpa-flash", "FLASH_ATTENTION")]


def gen2_main(args) -> None:
    """The generation-2 benchmark (--gen2; the module docstring): compile the prefill configs, check
    them and the decode plans, then host cost, prefill and decode timings."""
    import kernels

    sz = GEN2_SMOKE_SIZES if args.smoke else GEN2_SIZES
    timing = f"{_timing(args)}; host cost: CPU wall of {sz.host_calls} back-to-back calls"
    ctx = _start(args, timing, generation=kernels.GENERATION)
    ctx.t_start = time.perf_counter()
    configs = _gen2_compile(ctx, gen2_prefill_configs(args.smoke))
    timed, checks = _gen2_correctness(ctx, sz, configs)
    _gen2_host_cost(ctx, sz)
    for batch, seq in sz.prefill:
        _gen2_time_prefill(ctx, timed, batch, seq)
    for batch, kv_len in sz.decode:
        _gen2_time_decode(ctx, sz, batch, kv_len)
    summary = gen2_summary(ctx.rows)
    md = gen2_markdown(ctx.env, ctx.broken, checks, ctx.rows, summary)
    payload = {"env": ctx.env, "broken": ctx.broken, "checks": checks, "rows": ctx.rows, "summary": summary}
    _write_outputs(ctx, "bench_gen2", payload, md)


def _err(exc) -> str:
    text = str(exc).splitlines()[0][:160] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"


def _other_merge():
    """Decode's split merge other than the default's, timed beside it (Variant.decode_reduce_in_kernel)."""
    import kernels

    default = kernels.DEFAULT_VARIANT
    return dataclasses.replace(default, decode_reduce_in_kernel=not default.decode_reduce_in_kernel)


def _gen2_write_partial(ctx: Bench) -> None:
    (ctx.args.out / "bench_gen2_partial.json").write_text(
        json.dumps({"env": ctx.env, "broken": ctx.broken, "rows": ctx.rows})
    )


# -- 1. compile every prefill config in parallel subprocesses (Triton's disk cache) --------------------


def _compile_sub(cfg):
    """(cfg, None), or (cfg, the problem) where compiling cfg in a --compile-one subprocess failed."""
    cmd = [sys.executable, "-W", "ignore", __file__, "--compile-one", json.dumps(cfg)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
        last = (done.stdout.strip().splitlines() or ["{}"])[-1]
        result = json.loads(last) if last.startswith("{") else {}
        if done.returncode != 0 or not result.get("ok"):
            return cfg, result.get("error") or f"rc {done.returncode}: {done.stderr.strip()[-160:]}"
    except subprocess.TimeoutExpired:
        return cfg, "compile timed out (240 s)"
    return cfg, None


def _gen2_compile(ctx: Bench, configs: list) -> list:
    """Compiles the configs (not under --smoke), marks those that fail broken; returns the rest."""
    if not ctx.smoke:
        workers = max(1, min(14, (os.cpu_count() or 2) - 1))
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            for cfg, problem in pool.map(_compile_sub, configs):
                if problem:
                    ctx.broken[config_name(*cfg)] = problem
        ctx.log(
            f"compiled {len(configs)} prefill configs with {workers} workers; broken: {ctx.broken or 'none'}"
        )
    return [c for c in configs if config_name(*c) not in ctx.broken]


# -- 2. correctness on the device, before any timing ----------------------------------------------------


def _gen2_correctness(ctx: Bench, sz: Gen2Sizes, configs: list) -> tuple[list, dict]:
    """Every check (check rows into ctx.rows, failures into ctx.broken); returns the prefill
    (tile, variant, what) configs that passed and the checks' summary."""
    t, timed = _gen2_prefill_checks(ctx, configs)
    _gen2_chunk_checks(ctx)
    identical = _gen2_decode_checks(ctx, sz)
    p, more, misaligned_refused = _gen2_gen1_plan_checks(ctx, t)
    identical += more
    checks = [r for r in ctx.rows if r["kind"] == "check"]
    summary_checks = dict(
        passed=sum(r["passed"] for r in checks),
        total=len(checks),
        worst_rel_err=max((r["rel_err"] for r in checks), default=None),
        plan_bit_identical=f"{sum(identical)}/{len(identical)}",
        misaligned_refused=misaligned_refused,
        direct_launchers=p.direct,
        fallback_reasons=p.fallback_reasons,
    )
    ctx.log(f"correctness: {summary_checks}; broken: {ctx.broken or 'none'}")
    return timed, summary_checks


def _gen2_check(ctx: Bench, label: str, out, ref) -> bool:
    """A check row for out against the float64 reference; a failure marks label's first word broken."""
    tol = BF16_TOL if not ctx.smoke else (5e-3, 1e-2)
    rel, mabs, nans = _errors(out, ref)
    ok = nans == 0 and rel <= tol[0] and mabs <= tol[1]
    ctx.rows.append(dict(kind="check", impl=label, rel_err=rel, max_abs_err=mabs, nan_count=nans, passed=ok))
    if not ok:
        ctx.broken.setdefault(label.split(" ")[0], f"{label}: rel {rel:.2e} abs {mabs:.2e} nan {nans}")
    return ok


def _gen2_prefill_checks(ctx: Bench, configs: list) -> tuple[dict, list]:
    """Each prefill config (and the unfused candidates built on the 'attn' ones) on one causal
    prefill; returns the check's tensors and the (tile, variant, what) that passed."""
    from kernels import reference_attention

    b_chk, s_chk = (2, 1000) if not ctx.smoke else (1, 33)
    t = ctx.prefill_tensors(b_chk, s_chk)
    ref = reference_attention(t["q"], t["k"], t["v"], t["cos"], t["sin"], rotate_k=True)
    timed = []  # (cfg, what) pairs that passed
    for cfg in configs:
        whats = (
            [cfg[2]]
            + (["unfused"] if cfg[2] == "attn" else [])
            + (["g1-unfused"] if cfg[2] == "g1-attn" else [])
        )
        for what in whats:
            label = config_name(cfg[0], cfg[1], what)
            try:
                t["out"].fill_(float("nan"))
                build_prefill((cfg[0], cfg[1], what), t, ctx.device)()
                ctx.sync()
            except Exception as exc:
                ctx.broken[label] = _err(exc)
                continue
            if _gen2_check(ctx, f"{label} prefill B{b_chk} S{s_chk}", t["out"], ref):
                timed.append((cfg[0], cfg[1], what))
    return t, timed


def _gen2_chunk_checks(ctx: Bench) -> None:
    """A chunk over a cached prefix (rotate_k=False) through the generation-2 prefill kernel, each
    variant and RoPE placement."""
    import kernels
    from kernels import Tile, reference_attention

    sq, skv = (77, 3001) if not ctx.smoke else (7, 50)
    q = ctx.rand(1, ctx.heads_q, sq, ctx.head_dim)
    k = ctx.rand(1, ctx.heads_kv, skv, ctx.head_dim)
    v = ctx.rand(1, ctx.heads_kv, skv, ctx.head_dim)
    cos, sin = ctx.tables(skv)
    ref_chunk = reference_attention(q, k, v, cos, sin, rotate_k=False)
    tile = Tile(*(GEN2_TILES[0] if not ctx.smoke else GEN2_SMOKE_TILE))
    for vname in VARIANTS:
        for mode in kernels.ROPE_MODES:
            try:
                variant = kernels.Variant(*VARIANTS[vname])
                out = kernels.attention(
                    q, k, v, cos, sin, tile=tile, rope=mode, rotate_k=False, variant=variant
                )
                ctx.sync()
                _gen2_check(ctx, f"{tile.name}-{vname}-{mode} chunk Sq{sq} Skv{skv}", out, ref_chunk)
            except Exception as exc:
                ctx.broken[f"{tile.name}-{vname}-{mode} chunk"] = _err(exc)


def _gen2_decode_checks(ctx: Bench, sz: Gen2Sizes) -> list[bool]:
    """Decode through the split path, each decode tile with and without rotate_k; returns whether
    each plan.run (compiled launchers) gave the same bits as attention() (Triton JIT)."""
    from kernels import Tile, reference_attention

    bd, skv = (3, 5000) if not ctx.smoke else (2, 70)
    q = ctx.rand(bd, ctx.heads_q, 1, ctx.head_dim)
    k = ctx.rand(bd, ctx.heads_kv, skv, ctx.head_dim)
    v = ctx.rand(bd, ctx.heads_kv, skv, ctx.head_dim)
    cos, sin = ctx.tables(skv)
    refs = {rk: reference_attention(q, k, v, cos, sin, rotate_k=rk) for rk in (False, True)}
    identical = []
    for tile_t in sz.decode_tiles:
        tile = Tile(*tile_t)
        for rk in (False, True):
            identical += _gen2_decode_tile_checks(ctx, tile, rk, (q, k, v, cos, sin), refs[rk])
    return identical


def _gen2_decode_tile_checks(ctx: Bench, tile, rk: bool, a: tuple, ref) -> list[bool]:
    """One decode tile and rotate_k on the tensors a = (q, k, v, cos, sin): each RoPE placement's
    plan and the other split merge against ref; plan.run against attention(), bit for bit."""
    import kernels

    q, k = a[0], a[1]
    bd, skv = q.shape[0], k.shape[2]
    other_merge = _other_merge()
    for mode in kernels.ROPE_MODES:
        p = kernels.plan(*a, tile=tile, rope=mode, rotate_k=rk)
        out = p.run(*a, torch.full_like(q, float("nan")))
        ctx.sync()
        _gen2_check(
            ctx, f"{tile.name}-{mode} decode B{bd} Skv{skv} rotate_k={rk} splits={p.num_splits}", out, ref
        )
    p = kernels.plan(*a, tile=tile, rope="fused", rotate_k=rk, variant=other_merge)
    out = p.run(*a, torch.full_like(q, float("nan")))
    ctx.sync()
    _gen2_check(ctx, f"{tile.name}-fused-{other_merge.name} decode B{bd} Skv{skv} rotate_k={rk}", out, ref)
    identical = []
    for fused in (True, False):
        p = kernels.plan(*a, tile=tile, fused=fused, rotate_k=rk)
        x = p.run(*a)
        y = kernels.attention(*a, tile=tile, fused=fused, rotate_k=rk)
        ctx.sync()
        identical.append(bool(torch.equal(x, y)))
    return identical


def _gen2_gen1_plan_checks(ctx: Bench, t: dict) -> tuple:
    """Generation-1 prefill through a plan, bit-identical to attention(fused=...), on the prefill
    check's tensors t; returns the last plan, the bit-identity results and whether that plan
    refuses a misaligned view of the same shape."""
    import kernels
    from kernels import Tile

    tile = Tile(*GEN1_PREFILL_TILES[0]) if not ctx.smoke else Tile(*GEN2_SMOKE_TILE)
    a = (t["q"], t["k"], t["v"], t["cos"], t["sin"])
    identical = []
    for fused in (True, False):
        p = kernels.plan(*a, tile=tile, fused=fused, rotate_k=True)
        x = p.run(*a)
        y = kernels.attention(*a, tile=tile, fused=fused, rotate_k=True)
        ctx.sync()
        identical.append(bool(torch.equal(x, y)))
    misaligned_refused = False
    storage = torch.empty(t["q"].numel() + 1, dtype=ctx.dtype, device=ctx.device)
    q_off = storage[1:].view(t["q"].shape)
    q_off.copy_(t["q"])
    try:
        p.run(q_off, *a[1:])
    except ValueError:
        misaligned_refused = True
    return p, identical, misaligned_refused


# -- 3. host cost per call (GPU kept ahead) -------------------------------------------------------------


def _gen2_host_cost(ctx: Bench, sz: Gen2Sizes) -> None:
    """Host µs per call of an empty kernel, the decode and prefill entry points and cuDNN: host rows."""
    import kernels

    anchor = torch.zeros(1, device=ctx.device)
    host = [
        (
            "empty Triton kernel (JIT launch, 1 argument)",
            ctx.host_us(lambda: kernels.empty_kernel_launch(anchor), sz.host_calls, warm=True),
        )
    ]
    decode, a = _gen2_host_decode(ctx, sz)
    host += decode + _gen2_host_prefill(ctx, sz)
    if not ctx.smoke:
        cudnn_decode = _sdpa_fn("CUDNN_ATTENTION", *a[:3], False)
        host.append(
            (
                f"torch SDPA cuDNN decode, B1 Skv{sz.host_kv}",
                ctx.host_us(cudnn_decode, sz.host_calls, warm=True),
            )
        )
    for label, us in host:
        ctx.rows.append(dict(kind="host", impl=label, host_us=us))
    _gen2_write_partial(ctx)
    ctx.log("host cost: " + "; ".join(f"{label}: {us:.1f} us" for label, us in host))


def _gen2_host_decode(ctx: Bench, sz: Gen2Sizes) -> tuple[list, tuple]:
    """(label, host µs) of attention() and Plan.run at decode (B1, host_kv keys), and the tensors
    (q, k, v, cos, sin) they ran on."""
    import kernels
    from kernels import Tile

    n = sz.host_kv
    q = ctx.rand(1, ctx.heads_q, 1, ctx.head_dim)
    k, v = ctx.rand(1, ctx.heads_kv, n, ctx.head_dim), ctx.rand(1, ctx.heads_kv, n, ctx.head_dim)
    cos, sin = ctx.tables(n)
    a, out = (q, k, v, cos, sin), torch.empty_like(q)
    tile = Tile(*sz.decode_tiles[0])
    p1 = kernels.plan(*a, tile=tile, fused=True, rotate_k=False)
    p2 = kernels.plan(*a, tile=tile, rope="fused", rotate_k=False)

    def us(fn) -> float:
        return ctx.host_us(fn, sz.host_calls, warm=True)

    host = [
        (
            f"attention() decode gen-1 fused, B1 Skv{n}, out= given ({p1.launches} launches)",
            us(lambda: kernels.attention(*a, tile=tile, fused=True, rotate_k=False, out=out)),
        ),
        (
            f"attention() decode gen-2 rope='fused' (cached plan), B1 Skv{n}, out= given",
            us(lambda: kernels.attention(*a, tile=tile, rope="fused", rotate_k=False, out=out)),
        ),
        (
            f"Plan.run decode gen-1 fused, B1 Skv{n}, out= given ({p1.launches} launches)",
            us(lambda: p1.run(*a, out)),
        ),
        (
            f"Plan.run decode gen-2 rope='fused', B1 Skv{n}, out= given ({p2.launches} launches)",
            us(lambda: p2.run(*a, out)),
        ),
    ]
    other_merge = _other_merge()
    p3 = kernels.plan(*a, tile=tile, rope="fused", rotate_k=False, variant=other_merge)
    host.append(
        (
            f"Plan.run decode gen-2 rope='fused', other merge ({other_merge.name}), out= given ({p3.launches} launches)",
            us(lambda: p3.run(*a, out)),
        )
    )
    host.append(("Plan.run decode gen-2 rope='fused', out=None (allocates)", us(lambda: p2.run(*a))))
    return host, a


def _gen2_host_prefill(ctx: Bench, sz: Gen2Sizes) -> list:
    """(label, host µs) of Plan.run at prefill (B1, host_seq), each RoPE placement."""
    import kernels
    from kernels import Tile

    tp = ctx.prefill_tensors(1, sz.host_seq)
    a = (tp["q"], tp["k"], tp["v"], tp["cos"], tp["sin"])
    host = []
    for mode in kernels.ROPE_MODES:
        tile = Tile(*(GEN2_TILES[0] if not ctx.smoke else GEN2_SMOKE_TILE))
        pp = kernels.plan(*a, tile=tile, rope=mode, rotate_k=True)
        host.append(
            (
                f"Plan.run prefill gen-2 rope={mode!r}, B1 S{sz.host_seq}, out= given ({pp.launches} launches)",
                ctx.host_us(lambda pp=pp: pp.run(*a, tp["out"]), sz.host_calls, warm=True),
            )
        )
    return host


# -- 4. prefill timings; 5. decode: eager, CUDA Graph replay and host cost ----------------------------


def _gen2_sdpa(ctx: Bench) -> list[tuple[str, str]]:
    return [] if ctx.smoke else GEN2_SDPA


def _gen2_time_prefill(ctx: Bench, timed: list, batch: int, seq: int) -> None:
    """Times every checked prefill config and SDPA on one prefill shape into ctx.rows."""
    tp = ctx.prefill_tensors(batch, seq)
    flops = 4 * ctx.head_dim * batch * ctx.heads_q * pairs_visible(seq, seq)
    fns = [(config_name(*c), c[2], lambda c=c: build_prefill(c, tp, ctx.device)) for c in timed]
    fns += [
        (n, "sdpa", lambda be=be: _sdpa_fn(be, tp["qr"], tp["kr"], tp["v"], True))
        for n, be in _gen2_sdpa(ctx)
    ]
    for label, what, make in fns:
        row = dict(kind="time", phase="prefill", batch=batch, q_len=seq, kv_len=seq, impl=label, what=what)
        try:
            fn = make()
            fn()
            ctx.sync()
            us = ctx.bench(fn)
            row.update(median_us=us, tflops=flops / us / 1e6, status="ok")
        except Exception as exc:
            row.update(status=_err(exc))
        ctx.rows.append(row)
    best = min(
        (
            r
            for r in ctx.rows
            if r.get("phase") == "prefill"
            and r["batch"] == batch
            and r["q_len"] == seq
            and r.get("status") == "ok"
        ),
        key=lambda r: r["median_us"],
        default=None,
    )
    _gen2_write_partial(ctx)
    ctx.log(
        f"prefill B{batch} S{seq}: best {best and best['impl']} {best and round(best['median_us'], 1)} us"
    )


def _gen2_time_decode(ctx: Bench, sz: Gen2Sizes, batch: int, kv_len: int) -> None:
    """Times the decode plans, generation 1's attention() and SDPA on one decode shape into ctx.rows:
    eager, and (not under --smoke) host cost per call and CUDA Graph replay."""
    q = ctx.rand(batch, ctx.heads_q, 1, ctx.head_dim)
    k = ctx.rand(batch, ctx.heads_kv, kv_len, ctx.head_dim)
    v = ctx.rand(batch, ctx.heads_kv, kv_len, ctx.head_dim)
    cos, sin = ctx.tables(kv_len)
    kv_bytes = 2 * k.numel() * k.element_size()
    for label, what, fn in _gen2_decode_fns(ctx, sz, (q, k, v, cos, sin), torch.empty_like(q)):
        row = dict(kind="time", phase="decode", batch=batch, q_len=1, kv_len=kv_len, impl=label, what=what)
        try:
            fn()
            ctx.sync()
            us = ctx.bench(fn)
            row.update(median_us=us, gbps=kv_bytes / us / 1e3, status="ok")
            if not ctx.smoke:
                row["host_us"] = ctx.host_us(fn, 200, warm=True)
                try:
                    row["graph_us"] = ctx.graph_us(fn)
                except Exception as exc:
                    row["graph_status"] = _err(exc)
        except Exception as exc:
            row.update(status=_err(exc))
        ctx.rows.append(row)
    ctx.log(f"decode B{batch} Skv{kv_len} done")


def _gen2_decode_fns(ctx: Bench, sz: Gen2Sizes, a: tuple, out) -> list[tuple]:
    """(impl, what, callable) of each decode tile's plan (default and other split merge) and
    generation-1 attention(), and SDPA's backends, on the tensors a = (q, k, v, cos, sin)."""
    import kernels
    from kernels import Tile

    other_merge = _other_merge()
    fns = []
    for tile_t in sz.decode_tiles:
        tile = Tile(*tile_t)
        p = kernels.plan(*a, tile=tile, rope="fused", rotate_k=False)
        fns.append((f"{tile.name}-plan-fused", "plan", lambda p=p: p.run(*a, out)))
        p2 = kernels.plan(*a, tile=tile, rope="fused", rotate_k=False, variant=other_merge)
        fns.append((f"{tile.name}-plan-fused-{other_merge.name}", "plan-alt", lambda p=p2: p.run(*a, out)))
        fns.append(
            (
                f"{tile.name}-g1-fused",
                "g1",
                lambda tile=tile: kernels.attention(*a, tile=tile, fused=True, rotate_k=False, out=out),
            )
        )
    fns += [(n, "sdpa", _sdpa_fn(be, *a[:3], False)) for n, be in _gen2_sdpa(ctx)]
    return fns


def gen2_summary(rows) -> dict:
    """Per prefill shape: best SDPA, best gen-1 / gen-2 candidate (RoPE included), best attention
    alone, and each RoPE placement's cost over the same tile+variant's attention alone; per
    decode shape: eager and graph-replay times of plan.run, generation-1 attention() and cuDNN."""
    ok = [r for r in rows if r["kind"] == "time" and r.get("status") == "ok"]
    out = {"prefill": [], "decode": []}
    for batch, seq in sorted({(r["batch"], r["q_len"]) for r in ok if r["phase"] == "prefill"}):
        rs = [r for r in ok if r["phase"] == "prefill" and (r["batch"], r["q_len"]) == (batch, seq)]
        out["prefill"].append(_gen2_prefill_entry(rs, batch, seq))
    for batch, kv in sorted({(r["batch"], r["kv_len"]) for r in ok if r["phase"] == "decode"}):
        rs = [r for r in ok if r["phase"] == "decode" and (r["batch"], r["kv_len"]) == (batch, kv)]
        out["decode"].append(_gen2_decode_entry(rs, batch, kv))
    return out


def _gen2_prefill_entry(rs, batch: int, seq: int) -> dict:
    """gen2_summary's entry for one prefill shape, from its timed rows ``rs``."""
    by = {r["impl"]: r for r in rs}

    def best(whats, rs=rs):
        sel = [r for r in rs if r["what"] in whats]
        return min(sel, key=lambda r: r["median_us"]) if sel else None

    sdpa, g1, g2 = best({"sdpa"}), best({"g1-fused", "g1-unfused"}), best({"q_fused", "fused", "unfused"})
    attn2, attn1 = best({"attn"}), best({"g1-attn"})
    over = {}
    for what in ("q_fused", "fused", "unfused", "g1-fused"):
        b = best({what})
        base = b and by.get(b["impl"].rsplit("-", 1)[0] + ("-g1-attn" if what == "g1-fused" else "-attn"))
        if what == "g1-fused" and b:
            base = by.get(b["impl"].replace("-g1-fused", "-g1-attn"))
        ratios = [
            r["median_us"] / by[key]["median_us"]
            for r in rs
            if r["what"] == what
            for key in [r["impl"].replace(f"-{what}", "-g1-attn" if what == "g1-fused" else "-attn")]
            if key in by
        ]
        over[what] = dict(
            best=b and b["impl"],
            best_us=b and b["median_us"],
            best_over_attn=(b["median_us"] / base["median_us"]) if b and base else None,
            range_over_attn=[min(ratios), max(ratios)] if ratios else None,
        )
    return dict(
        batch=batch,
        seq=seq,
        sdpa=sdpa and sdpa["impl"],
        sdpa_us=sdpa and sdpa["median_us"],
        gen1=g1 and g1["impl"],
        gen1_us=g1 and g1["median_us"],
        gen2=g2 and g2["impl"],
        gen2_us=g2 and g2["median_us"],
        attn2=attn2 and attn2["impl"],
        attn2_us=attn2 and attn2["median_us"],
        attn1=attn1 and attn1["impl"],
        attn1_us=attn1 and attn1["median_us"],
        over_attn=over,
    )


def _gen2_decode_entry(rs, batch: int, kv: int) -> dict:
    """gen2_summary's entry for one decode shape, from its timed rows ``rs``."""

    def best(what, key, rs=rs):
        sel = [r for r in rs if r["what"] == what and r.get(key) is not None]
        return min(sel, key=lambda r: r[key]) if sel else None

    entry = dict(batch=batch, kv_len=kv)
    for what in ("plan", "plan-alt", "g1", "sdpa"):
        e, g = best(what, "median_us"), best(what, "graph_us")
        entry[what] = dict(
            eager=e and e["impl"],
            eager_us=e and e["median_us"],
            host_us=e and e.get("host_us"),
            graph=g and g["impl"],
            graph_us=g and g["graph_us"],
        )
    return entry


def _ratio(a, b):
    return _f(a / b if a and b else None, ".3f")


def _gen2_prefill_lines(summary) -> list[str]:
    """Markdown: per prefill shape, the best SDPA, gen-1 and gen-2 candidates and gen-2 attention alone."""
    lines = [
        "",
        "Prefill (median µs; ratios SDPA/ours, so 1.0 = parity):",
        "",
        "| B | S | best SDPA | µs | gen-1 best cand | µs | ratio | gen-2 best cand | µs | ratio | gen-2 attn alone | µs | ratio |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in summary["prefill"]:
        lines.append(
            f"| {s['batch']} | {s['seq']} | {s['sdpa']} | {_f(s['sdpa_us'], '.1f')} | {s['gen1']} | {_f(s['gen1_us'], '.1f')} | "
            f"{_ratio(s['sdpa_us'], s['gen1_us'])} | {s['gen2']} | {_f(s['gen2_us'], '.1f')} | {_ratio(s['sdpa_us'], s['gen2_us'])} | "
            f"{s['attn2']} | {_f(s['attn2_us'], '.1f')} | {_ratio(s['sdpa_us'], s['attn2_us'])} |"
        )
    return lines


def _gen2_rope_lines(summary) -> list[str]:
    """Markdown: per prefill shape, each RoPE placement's cost over the same tile's attention alone."""
    lines = [
        "",
        "RoPE placement cost over the same tile+variant's attention alone (best config; range over configs):",
        "",
        "| B | S | q_fused | × attn | range | fused (gen-2) | × attn | range | unfused (gen-2) | × attn | g1-fused | × attn |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in summary["prefill"]:
        o = s["over_attn"]

        def rng(x):
            return (
                "-"
                if not x["range_over_attn"]
                else f"{x['range_over_attn'][0]:.2f}–{x['range_over_attn'][1]:.2f}"
            )

        lines.append(
            f"| {s['batch']} | {s['seq']} | {o['q_fused']['best']} | {_f(o['q_fused']['best_over_attn'], '.3f')} | {rng(o['q_fused'])} | "
            f"{o['fused']['best']} | {_f(o['fused']['best_over_attn'], '.3f')} | {rng(o['fused'])} | "
            f"{o['unfused']['best']} | {_f(o['unfused']['best_over_attn'], '.3f')} | "
            f"{o['g1-fused']['best']} | {_f(o['g1-fused']['best_over_attn'], '.3f')} |"
        )
    return lines


def _gen2_decode_lines(summary) -> list[str]:
    """Markdown: per decode shape, eager and graph-replay plan.run, gen-1 attention() and SDPA."""
    lines = [
        "",
        "Decode (µs; eager = do_bench with L2 flush, host cost inside; graph = CUDA Graph replay):",
        "",
        "| B | Skv | best SDPA eager | plan.run eager (best tile) | ratio | gen-1 attention() eager | ratio | best SDPA graph | plan.run graph (best tile) | ratio | plan.run other decode merge, graph | ratio | host µs plan / SDPA |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in summary["decode"]:
        c, p, g = s["sdpa"], s["plan"], s["g1"]
        lines.append(
            f"| {s['batch']} | {s['kv_len']} | {_f(c['eager_us'], '.1f')} | {p['eager']} {_f(p['eager_us'], '.1f')} | "
            f"{_ratio(c['eager_us'], p['eager_us'])} | {_f(g['eager_us'], '.1f')} | {_ratio(c['eager_us'], g['eager_us'])} | "
            f"{_f(c['graph_us'], '.1f')} | {p['graph']} {_f(p['graph_us'], '.1f')} | {_ratio(c['graph_us'], p['graph_us'])} | "
            f"{_f(s['plan-alt']['graph_us'], '.1f')} | {_ratio(c['graph_us'], s['plan-alt']['graph_us'])} | "
            f"{_f(p['host_us'], '.1f')} / {_f(c['host_us'], '.1f')} |"
        )
    return lines


def gen2_markdown(env, broken, checks, rows, summary) -> str:
    lines = [
        f"Device: {env['device']} ({env['sm_count']} SMs); torch {env['torch']}, triton {env['triton']}, "
        f"CUDA {env['cuda']}, cuDNN {env['cudnn']}; {env['date_utc']}; tables {env['table_dtype']}; {env['timing']}.",
        "",
        f"Correctness: {checks}",
        "",
        f"Broken (not timed): {broken or 'none'}",
        "",
        "Host cost per call:",
        "",
        "| call | host µs/call |",
        "| --- | --- |",
    ]
    lines += [f"| {r['impl']} | {r['host_us']:.1f} |" for r in rows if r["kind"] == "host"]
    lines += _gen2_prefill_lines(summary) + _gen2_rope_lines(summary) + _gen2_decode_lines(summary)
    shapes = sorted(
        {(r["phase"], r["batch"], r["kv_len"]) for r in rows if r["kind"] == "time"},
        key=lambda c: (c[0] != "prefill", c[1], c[2]),
    )
    impls = sorted({(r["phase"], r["impl"]) for r in rows if r["kind"] == "time"})
    lines += _timings_lines(rows, shapes, [impl for _phase, impl in impls])
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except Exception as exc:
        traceback.print_exc()
        raise SystemExit(1) from exc
