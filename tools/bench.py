"""Kernel benchmark: the study's candidates of each generation against torch SDPA, on one GPU.

    PYTHONUNBUFFERED=1 python3 tools/bench.py --out DIR [--generations 1 2] [--tiles config|explore|both]
        [--table-variant] [--skip-sdpa]
    TRITON_INTERPRET=1 python3 tools/bench.py --out DIR --smoke   # CPU dry run: checks the program only

The shape is the study's partition (config `partition:`; --smoke: the `smoke` overlay's, one tile,
tiny lengths). A candidate is a tile (config `tiles:`) crossed with each RoPE placement of its
generation (families/attention/candidates.py: generation 1 unfused/fused, generation 2 adds q_fused), run as
the study runs it (families/attention/runner.py). First each candidate is checked on the device against the
float64 reference within the study's tolerance (config `correctness.tolerances`; the correctness
gate's check, families/attention/correctness.check_one) on a prefill, a decode long enough to split, and a
chunk of queries over a cache; one that fails or cannot run is reported and not timed. Then
prefill (causal, Sq = Skv, k rotated) and decode (Sq = 1, rotated cache) cases are timed by the
project's harness (measure/timing.Harness, the portfolio's reps; eager with L2 flushed before each
call, decode also under CUDA Graph replay, and the host time per eager call), for:
  - each candidate with RoPE (impl `<tile>-<placement>`, generation 2 `<tile>-g2-<placement>`),
  - each tile's attention alone on pre-rotated inputs (`<tile>-attn-only`, RoPE skipped),
  - --table-variant: each fused candidate with float32 cos/sin tables (`...-fused-f32tables`),
  - torch SDPA with each backend that runs (cuDNN, flash, efficient; enable_gqa=True; no RoPE).
Writes DIR/bench.json (environment, broken candidates, rows, summary), DIR/bench.csv (the rows)
and DIR/bench.md (the tables), and prints the Markdown. TFLOP/s counts causal FLOPs (4 * D per
visible query-key pair); decode GB/s counts the K and V bytes read once.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kernels  # noqa: E402  (after the path: this checkout's kernels)
from headroom.core import defaults, format  # noqa: E402
from headroom.core.config import deep_merge  # noqa: E402
from headroom.families.attention import candidates, runner  # noqa: E402
from headroom.families.attention import correctness as attention  # noqa: E402
from headroom.measure import correctness, environment, timing  # noqa: E402

PREFILL = [(1, 512), (1, 2048), (1, 8192), (4, 2048), (8, 1024)]  # (batch, seq)
DECODE = [(b, kv) for b in (1, 16, 64) for kv in (2048, 8192, 32768)]  # (batch, kv_len)
# (name, phase, batch, q_len, kv_len) of the checks: odd lengths, a decode that splits, a chunk
CHECKS = [
    ("prefill", "prefill", 2, 1000, 1000),
    ("decode", "decode", 3, 1, 5000),
    ("chunk", "decode", 1, 77, 3001),
]
SMOKE_PREFILL, SMOKE_DECODE = [(1, 40)], [(2, 100)]
SMOKE_CHECKS = [
    ("prefill", "prefill", 1, 33, 33),
    ("decode", "decode", 2, 1, 70),
    ("chunk", "decode", 1, 7, 50),
]
# Tiles tried beside the study's when choosing its next tile list (--tiles explore|both).
EXPLORE_TILES = [(128, 64, 8, 4), (64, 64, 4, 4), (128, 64, 4, 3)]
SDPA = {
    "sdpa-cudnn": "CUDNN_ATTENTION",
    "sdpa-flash": "FLASH_ATTENTION",
    "sdpa-efficient": "EFFICIENT_ATTENTION",
}
HOST_CALLS = 100  # eager calls whose host time (clock around each call, no synchronize) is the median
PLACEMENTS = {1: candidates.GENERATION_1_PLACEMENTS, 2: candidates.ROPE_PLACEMENTS}  # generations as data


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for bench.{json,csv,md}")
    ap.add_argument("--generations", type=int, nargs="+", default=[1, 2], choices=sorted(PLACEMENTS))
    ap.add_argument("--tiles", default="config", choices=["config", "explore", "both"])
    ap.add_argument(
        "--table-variant", action="store_true", help="also time fused candidates with float32 tables"
    )
    ap.add_argument("--skip-sdpa", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="CPU dry run under TRITON_INTERPRET=1")
    return ap


def study(smoke: bool) -> dict:
    """The default study (config/config.yaml), its `smoke` overlay merged in for --smoke."""
    cfg = defaults.study()
    return deep_merge(cfg, cfg["smoke"]) if smoke else cfg


def tile_rows(cfg: dict, which: str, smoke: bool) -> list[dict]:
    """The tiles benchmarked: the study's (config `tiles:`), the exploration's, or both."""
    keys = ("block_m", "block_n", "num_warps", "num_stages")
    explore = [dict(zip(keys, t, strict=True)) for t in EXPLORE_TILES]
    tiles = {"config": cfg["tiles"], "explore": explore, "both": cfg["tiles"] + explore}[which]
    unique = list({tuple(t[k] for k in keys): t for t in tiles}.values())
    return unique[:1] if smoke else unique


def candidate_rows(tiles: list[dict], generations: list[int]) -> list:
    """One row (families/attention/candidates' columns) per tile x placement of each generation."""
    frames = [candidates.build(tiles, PLACEMENTS[g], generation=g) for g in generations]
    return [row for frame in frames for row in frame.itertuples(index=False)]


def impl_name(cand) -> str:
    tile = kernels.Tile(int(cand.block_m), int(cand.block_n), int(cand.num_warps), int(cand.num_stages))
    return f"{tile.name}-{'g2-' if cand.generation == 2 else ''}{cand.rope}"


class Bench:
    """What the run's phases share: the device, the partition, the harnesses and the rows so far."""

    def __init__(self, args: argparse.Namespace) -> None:
        if args.smoke != kernels.interpreted():
            raise SystemExit("--smoke needs TRITON_INTERPRET=1; a GPU run needs it unset and a CUDA GPU")
        self.args, self.cfg = args, study(args.smoke)
        self.device = "interpret" if args.smoke else "cuda"
        self.tdev = "cpu" if args.smoke else "cuda"
        self.part = self.cfg["partition"]
        self.tol = correctness.tolerances(self.cfg["correctness"])[self.part["dtype"]]
        sampling = self.cfg["portfolio"]
        reps = dict(
            warmup=sampling["warmup_reps"], reps=sampling["reps"], graph_calls=sampling["graph_calls"]
        )
        self.eager = timing.Harness(self.device, flush_l2=not args.smoke, **reps)
        self.graph = None if args.smoke else timing.Harness("cuda", **reps)
        self.host = timing.Harness("interpret", warmup=1, reps=HOST_CALLS)
        self.sm_count = 1 if args.smoke else torch.cuda.get_device_properties(0).multi_processor_count
        self.rows: list[dict] = []
        self.broken: dict[str, str] = {}

    def shape(self, phase: str, batch: int, q_len: int, kv_len: int) -> SimpleNamespace:
        """A trace-like row of the partition (what the measure stages read)."""
        keys = ("heads_q", "heads_kv", "head_dim", "dtype")
        return SimpleNamespace(
            phase=phase, batch=batch, q_len=q_len, kv_len=kv_len, **{k: self.part[k] for k in keys}
        )

    def tables(self, kv_len: int, dtype: str | None = None) -> tuple:
        dtype = dtype or self.part["dtype"]
        return runner.tables(kv_len, self.part["head_dim"], dtype, self.part["rope_base"], self.tdev)


def check(b: Bench, cands: list) -> list:
    """The candidates that pass every check (the rest go to b.broken); one row per check."""
    checks = SMOKE_CHECKS if b.args.smoke else CHECKS
    passed = []
    for cand in cands:
        name, ok = impl_name(cand), True
        for label, phase, batch, q_len, kv_len in checks:
            shape = b.shape(phase, batch, q_len, kv_len)
            cos, sin = b.tables(kv_len)
            fn = runner.runner(cand, cos, sin, attention.rotate_k_for(phase))
            seed = correctness.input_seed(b.cfg["correctness"]["seed"], name, label)
            res = attention.check_one(
                fn, shape, seed=seed, device=b.device, tol=b.tol, rope_base=b.part["rope_base"]
            )
            b.rows.append(dict(kind="check", check=label, impl=name, q_len=q_len, kv_len=kv_len, **res))
            if res["status"] != "passed":
                b.broken[name] = f"{label}: {res['status']} {res['reason']}".strip()
                ok = False
                break
        print(f"check {name}: {'ok' if ok else b.broken[name]}", flush=True)
        passed += [cand] if ok else []
    return passed


def sdpa_fn(backend: str, causal: bool):
    """torch SDPA restricted to one backend (an SDPBackend member's name), GQA, no RoPE."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def fn(q, k, v, out=None):
        with sdpa_kernel([getattr(SDPBackend, backend)]):
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=causal, enable_gqa=True
            )

    return fn


def timed_fns(b: Bench, cands: list, case: dict, t: dict) -> list[tuple]:
    """(impl, family, fn, input set) for one case's tensors t (q, k, v; qr, kr rotated; out)."""
    rotate_k = case["phase"] == "prefill"
    raw, rotated = (t["q"], t["k"], t["v"], t["out"]), (t["qr"], t["kr"], t["v"], t["out"])
    cos, sin = b.tables(case["kv_len"])
    fns = [(impl_name(c), "triton", runner.runner(c, cos, sin, rotate_k), raw) for c in cands]
    for c in {(c.block_m, c.block_n, c.num_warps, c.num_stages): c for c in cands}.values():
        tile = kernels.Tile(int(c.block_m), int(c.block_n), int(c.num_warps), int(c.num_stages))

        def attn(q, k, v, out, tile=tile):
            return kernels.attention_unrotated(q, k, v, tile=tile, out=out)

        fns.append((f"{tile.name}-attn-only", "attn-only", attn, rotated))
    if b.args.table_variant and case["phase"] == "prefill":
        cos32, sin32 = b.tables(case["kv_len"], "float32")
        fused = [c for c in cands if c.rope == "fused"]
        fns += [
            (f"{impl_name(c)}-f32tables", "variant", runner.runner(c, cos32, sin32, True), raw) for c in fused
        ]
    if not (b.args.skip_sdpa or b.args.smoke):
        fns += [(n, "sdpa", sdpa_fn(be, case["q_len"] > 1), rotated) for n, be in SDPA.items()]
    return fns


def _error(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"


def time_row(b: Bench, case: dict, impl: str, family: str, fn, args: tuple) -> dict:
    """Median µs and rates of one callable; at decode (GPU) also CUDA Graph replay and host µs/call."""
    row = dict(kind="time", **case, impl=impl, family=family)
    pairs = case["q_len"] * (case["q_len"] + 1) // 2 + case["q_len"] * (case["kv_len"] - case["q_len"])
    flops = 4 * b.part["head_dim"] * case["batch"] * b.part["heads_q"] * pairs
    kv_bytes = 2 * args[1].numel() * args[1].element_size()
    try:
        us = float(np.median(b.eager.time("eager", fn, [args]).samples_us))
        row.update(median_us=us, tflops=flops / us / 1e6, gbps=kv_bytes / us / 1e3, status="ok")
    except Exception as exc:  # a shape a backend cannot run: reported in the row, not timed
        return {**row, "status": _error(exc)}
    if case["phase"] == "decode" and b.graph is not None:
        try:
            row["host_us"] = float(np.median(b.host.time("eager", fn, [args]).samples_us))
            row["graph_us"] = float(np.median(b.graph.time("graph", fn, [args]).samples_us))
        except Exception as exc:
            row["graph_status"] = _error(exc)
    return row


def time_case(b: Bench, cands: list, phase: str, batch: int, q_len: int, kv_len: int) -> None:
    """Times every candidate, attention alone and SDPA on one case into b.rows; prints the best."""
    gen = torch.Generator(device=b.tdev).manual_seed(b.cfg["portfolio"]["seed"])
    q, k, v = (
        torch.randn(s, generator=gen, device=b.tdev, dtype=torch.float32).to(getattr(torch, b.part["dtype"]))
        for s in (
            (batch, b.part["heads_q"], q_len, b.part["head_dim"]),  # (B, Hq, Sq, D)
            (batch, b.part["heads_kv"], kv_len, b.part["head_dim"]),  # (B, Hkv, Skv, D)
            (batch, b.part["heads_kv"], kv_len, b.part["head_dim"]),
        )
    )
    cos, sin = b.tables(kv_len)
    kr = kernels.rope(k, cos, sin, 0) if phase == "prefill" else k
    t = dict(q=q, k=k, v=v, qr=kernels.rope(q, cos, sin, kv_len - q_len), kr=kr, out=torch.empty_like(q))
    case = dict(phase=phase, batch=batch, q_len=q_len, kv_len=kv_len)
    rows = [time_row(b, case, *f) for f in timed_fns(b, cands, case, t)]
    b.rows += rows
    done = [r for r in rows if r["status"] == "ok"]
    best = min(done, key=lambda r: r["median_us"]) if done else None
    splits = (
        kernels.decode_split_plan(batch * b.part["heads_kv"], kv_len, b.sm_count)[0]
        if phase == "decode"
        else None
    )
    print(
        f"{phase} B={batch} Sq={q_len} Skv={kv_len} splits={splits}: best {best and best['impl']}", flush=True
    )


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    b = Bench(args)
    env = {
        **environment.describe(b.device),
        "date_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(sys.argv),
        "table_dtype": b.part["dtype"],
        "generations": args.generations,
        "timing": timing_text(b),
    }
    print(json.dumps(env), flush=True)
    cands = check(b, candidate_rows(tile_rows(b.cfg, args.tiles, args.smoke), args.generations))
    prefill, decode = (SMOKE_PREFILL, SMOKE_DECODE) if args.smoke else (PREFILL, DECODE)
    for phase, cases in (
        ("prefill", [(n, s, s) for n, s in prefill]),
        ("decode", [(n, 1, kv) for n, kv in decode]),
    ):
        for batch, q_len, kv_len in cases:
            time_case(b, cands, phase, batch, q_len, kv_len)
            (args.out / "bench_partial.json").write_text(json.dumps({"env": env, "rows": b.rows}))
    write(args.out, env, b.broken, b.rows)
    return 0


def timing_text(b: Bench) -> str:
    h = b.eager
    graph = (
        f"; decode also under CUDA Graph replay ({h.graph_calls} calls a graph, L2 not flushed)"
        if b.graph
        else ""
    )
    flush = "L2 flushed before each call" if h.flush_l2 else "L2 not flushed"
    return f"measure/timing.Harness median of {h.reps} calls after {h.warmup} warm-up, {flush}{graph}"


def write(out: Path, env: dict, broken: dict, rows: list[dict]) -> None:
    """OUT/bench.json, OUT/bench.csv and OUT/bench.md; the Markdown is printed too."""
    summary = summarize(rows)
    md = markdown(env, broken, rows, summary)
    payload = {"env": env, "broken": broken, "rows": rows, "summary": summary}
    (out / "bench.json").write_text(json.dumps(payload, indent=1, default=str))
    keys = sorted({k for r in rows for k in r})
    with open(out / "bench.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    (out / "bench.md").write_text(md)
    (out / "bench_partial.json").unlink(missing_ok=True)
    print(md, flush=True)


# -- the tables --------------------------------------------------------------------------------
def _time_rows(rows: list[dict], phase: str, batch: int, kv_len: int) -> list[dict]:
    return [
        r
        for r in rows
        if r["kind"] == "time" and (r["phase"], r["batch"], r["kv_len"]) == (phase, batch, kv_len)
    ]


def _best(rows: list[dict], pred, key: str = "median_us") -> dict | None:
    sel = [r for r in rows if r["status"] == "ok" and r.get(key) is not None and pred(r)]
    return min(sel, key=lambda r: r[key]) if sel else None


def _ratio(a: dict | None, b: dict | None, key: str = "median_us") -> float | None:
    return a[key] / b[key] if a and b else None


def summarize(rows: list[dict]) -> list[dict]:
    """Per case: the best SDPA, candidate, fused, unfused and attention-alone rows and their ratios."""
    cases = sorted(
        {(r["phase"], r["batch"], r["q_len"], r["kv_len"]) for r in rows if r["kind"] == "time"},
        key=lambda c: (c[0] != "prefill", c[1], c[3]),
    )
    out = []
    for phase, batch, q_len, kv_len in cases:
        rs = _time_rows(rows, phase, batch, kv_len)
        sdpa, cand = _best(rs, lambda r: r["family"] == "sdpa"), _best(rs, lambda r: r["family"] == "triton")
        fused = _best(rs, lambda r: r["family"] == "triton" and r["impl"].endswith("-fused"))
        unfused = _best(rs, lambda r: r["family"] == "triton" and r["impl"].endswith("-unfused"))
        attn = _best(rs, lambda r: r["family"] == "attn-only")
        tile = fused["impl"].split("-")[0] if fused else None
        same_attn = next((r for r in rs if r["impl"] == f"{tile}-attn-only" and r["status"] == "ok"), None)
        get = lambda r, k: r and r[k]  # noqa: E731
        out.append(
            dict(
                phase=phase,
                batch=batch,
                q_len=q_len,
                kv_len=kv_len,
                best_sdpa=get(sdpa, "impl"),
                best_sdpa_us=get(sdpa, "median_us"),
                best_candidate=get(cand, "impl"),
                best_candidate_us=get(cand, "median_us"),
                best_fused_us=get(fused, "median_us"),
                best_unfused_us=get(unfused, "median_us"),
                best_attn_only_us=get(attn, "median_us"),
                ratio_candidate_vs_sdpa=_ratio(sdpa, cand),
                ratio_attn_only_vs_sdpa=_ratio(sdpa, attn),
                fused_over_attn_only=_ratio(fused, same_attn),
                candidate_tflops=get(cand, "tflops"),
                candidate_gbps=get(cand, "gbps"),
                sdpa_tflops=get(sdpa, "tflops"),
                sdpa_gbps=get(sdpa, "gbps"),
            )  # fmt: skip
        )
    return out


def _rate(x) -> str:
    return "-" if x is None else format.fmt(round(x))


def _summary_lines(summary: list[dict]) -> list[str]:
    lines = [
        "| phase | B | Sq | Skv | best SDPA | µs | best candidate | µs | cand/SDPA | attn-only/SDPA "
        "| fused/attn-only (same tile) | TFLOP/s or GB/s (cand / SDPA) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in summary:
        unit, c, d = (
            ("TFLOP/s", "candidate_tflops", "sdpa_tflops")
            if s["phase"] == "prefill"
            else ("GB/s", "candidate_gbps", "sdpa_gbps")
        )
        lines.append(
            f"| {s['phase']} | {s['batch']} | {s['q_len']} | {s['kv_len']} | {s['best_sdpa'] or '-'} "
            f"| {format.us(s['best_sdpa_us'], 1)} | {s['best_candidate'] or '-'} | {format.us(s['best_candidate_us'], 1)} "
            f"| {format.speedup(s['ratio_candidate_vs_sdpa'])} | {format.speedup(s['ratio_attn_only_vs_sdpa'])} "
            f"| {format.speedup(s['fused_over_attn_only'])} | {_rate(s[c])} / {_rate(s[d])} {unit} |"
        )
    return lines


def _graph_lines(rows: list[dict], summary: list[dict]) -> list[str]:
    """Decode under CUDA Graph replay and the host time per eager call, per decode case."""
    lines = [
        "",
        "Decode under CUDA Graph replay (GPU time without launch gaps; L2 not flushed) and host time per eager call:",
        "",
        "| B | Skv | best candidate (graph) | µs | best SDPA (graph) | µs | cand/SDPA (graph) "
        "| host µs/call: best cand / cuDNN |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in (s for s in summary if s["phase"] == "decode"):
        rs = _time_rows(rows, "decode", s["batch"], s["kv_len"])
        c = _best(rs, lambda r: r["family"] == "triton", "graph_us")
        d = _best(rs, lambda r: r["family"] == "sdpa", "graph_us")
        cud = next((r for r in rs if r["impl"] == "sdpa-cudnn"), {})
        lines.append(
            f"| {s['batch']} | {s['kv_len']} | {c and c['impl']} | {format.us(c and c['graph_us'], 1)} "
            f"| {d and d['impl']} | {format.us(d and d['graph_us'], 1)} | {format.speedup(_ratio(d, c, 'graph_us'))} "
            f"| {format.us(c and c.get('host_us'), 1)} / {format.us(cud.get('host_us'), 1)} |"
        )
    return lines


def _timings_lines(rows: list[dict], summary: list[dict]) -> list[str]:
    """Each implementation's median per case ('fail' where it did not run, '-' where not timed)."""
    cases = [(s["phase"], s["batch"], s["kv_len"]) for s in summary]
    lines = [
        "",
        "All timings (median µs):",
        "",
        "| impl | " + " | ".join(f"{p} B{n} {kv}" for p, n, kv in cases) + " |",
    ]
    lines.append("| --- |" + " --- |" * len(cases))
    for impl in sorted({r["impl"] for r in rows if r["kind"] == "time"}):
        cells = []
        for case in cases:
            r = next((r for r in _time_rows(rows, *case) if r["impl"] == impl), None)
            cells.append(
                "-" if r is None else format.us(r["median_us"], 1) if r["status"] == "ok" else "fail"
            )
        lines.append(f"| {impl} | " + " | ".join(cells) + " |")
    return lines


def markdown(env: dict, broken: dict, rows: list[dict], summary: list[dict]) -> str:
    lines = [
        f"Device: {env['gpu_name']} ({env['sm_count']} SMs); torch {env['torch']}, triton {env['triton']}, "
        f"CUDA {env['cuda']}; {env['date_utc']}; generations {env['generations']}; tables {env['table_dtype']}; "
        f"{env['timing']}.",
        "",
        f"Broken candidates (not timed): {broken or 'none'}",
        "",
        *_summary_lines(summary),
    ]
    if any(r.get("graph_us") for r in rows):
        lines += _graph_lines(rows, summary)
    lines += _timings_lines(rows, summary)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
