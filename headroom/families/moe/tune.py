"""`headroom tune SPEC`: a per-M fused-MoE config table from our own benchmark, in the ecosystem's
JSON format (what vLLM's and SGLang's tuning scripts write, and what their servers read).

For every token count M of the standard list and every config of the grid (space.configs), the
projection runs on uniformly routed tokens (as the ecosystem's scripts benchmark it), the routing
alignment included in every call; on a GPU each config's calls are captured in a CUDA graph of
``calls`` calls and the graph replayed ``replays`` times (the median replay, per call), so host
launch cost does not blur the kernels' differences. Writes, in ``--out``:

- ``E=<experts>,N=<n>,device_name=<GPU>.json``: M -> the fastest config (the table);
- ``<that>.single.json``: the best single config: the least mean slowdown over the M list against
  each M's fastest (the one config a server would pin instead of the table);
- ``tune.parquet``: every (M, config) timing, its TFLOP/s, and a dense matmul of the same FLOPs
  timed the same way (``dense_tflops``): the rate the kernel is measured against.

Compiles are the bulk of a tune's wall time: on a GPU the grid is compiled first by a pool of
processes into the Triton cache (``--workers``), which the benchmark then loads.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[3]


def add_parser(sub: Any) -> None:
    """The `tune` verb of `headroom` (headroom.core.cli)."""
    t = sub.add_parser(
        "tune", help="a per-M fused-MoE config table (the ecosystem's JSON) from our benchmark"
    )
    t.add_argument("spec", help="a MoE family, e.g. headroom.families.moe.family:QWEN3")
    t.add_argument(
        "--out", required=True, help="folder for the table, its best single config and tune.parquet"
    )
    t.add_argument("--m", default=None, help="comma-separated token counts (default: the standard list)")
    t.add_argument("--max-configs", type=int, default=None, help="tune the first N configs of the grid only")
    t.add_argument("--device", choices=["auto", "cuda", "interpret"], default="auto")
    t.add_argument("--calls", type=int, default=10, help="calls per captured graph (default 10)")
    t.add_argument("--replays", type=int, default=5, help="timed replays per config and M (default 5)")
    t.add_argument("--workers", type=int, default=None, help="compile processes (default: the CPU count)")
    t.set_defaults(func=cmd_tune)


def cmd_tune(args: argparse.Namespace) -> int:
    from headroom.core import cli
    from headroom.families import loading
    from headroom.families.contract import FamilyError
    from headroom.families.moe import space

    try:
        ms = space.STANDARD_M if args.m is None else _ms(args.m)
        for name in ("max_configs", "calls", "replays", "workers"):
            value = getattr(args, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
        device = _device(args.device)
        family = loading.load(args.spec, device=device, root=PROJECT_ROOT).family
        layer = getattr(family, "layer", None)
        if layer is None:
            raise ValueError(f"{args.spec}: not a MoE family (no .layer): tune needs headroom.families.moe")
    except (FamilyError, ValueError) as exc:
        raise cli.CliError(str(exc), cli.EXIT_USAGE) from None
    configs = space.configs(layer.elem_bytes)[: args.max_configs]
    result = tune(
        layer, ms, configs, device=device, calls=args.calls, replays=args.replays, workers=args.workers
    )
    choice = best(result["rows"])
    paths = write(result, choice, Path(args.out), layer)
    print("\n".join(summary(result, choice, paths)))
    return 0


def _ms(text: str) -> tuple[int, ...]:
    try:
        ms = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"--m must be comma-separated ints, got {text!r}") from None
    if not ms or min(ms) < 1 or len(set(ms)) != len(ms):
        raise ValueError(f"--m must be distinct ints >= 1, got {text!r}")
    return tuple(sorted(ms))


def _device(choice: str) -> str:
    if choice != "auto":
        return choice
    import torch

    return "cuda" if torch.cuda.is_available() else "interpret"


def tune(layer, ms, configs, *, device: str, calls=10, replays=5, workers=None, seed=0) -> dict:
    """{rows: [...], seconds: {...}, device: ...}: every config timed at every M (module docstring)."""
    import torch

    from headroom.families.moe.family import route
    from headroom.families.tables import config_id

    t0 = time.perf_counter()
    if device == "cuda":
        try:
            _precompile(layer, configs, workers or os.cpu_count() or 1)
        except Exception as exc:  # the benchmark compiles what the pool did not, one by one
            print(f"tune: parallel compile failed ({type(exc).__name__}: {exc}); compiling serially")
    t_compile = time.perf_counter() - t0
    dev = "cuda" if device == "cuda" else "cpu"
    dt = getattr(torch, layer.dtype)
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(layer.experts, layer.n, layer.hidden, generator=g) / layer.hidden**0.5).to(dev, dt)
    rows = []
    for m in ms:
        a = torch.randn(m, layer.hidden, generator=g).to(dev, dt)
        ids = route(m, layer.experts, layer.top_k, "uniform", 0.0, g).to(dev, torch.int32)
        out = torch.empty(m * layer.top_k, layer.n, device=dev, dtype=dt)
        flops = 2.0 * m * layer.top_k * layer.n * layer.hidden
        dense_us = _dense_us(m * layer.top_k, layer, dev, dt, calls, replays)
        for config in configs:
            us = _config_us(a, w, ids, out, config, dev, calls, replays)
            rows.append({"m": m, "candidate": config_id(config), "config": json.dumps(config), "us": us,
                         "tflops": flops / us / 1e6, "dense_tflops": flops / dense_us / 1e6})  # fmt: skip
    seconds = {"compile": t_compile, "total": time.perf_counter() - t0}
    return {"rows": rows, "seconds": seconds, "device": _device_name(dev), "configs": configs}


def _config_us(a, w, ids, out, config, dev, calls, replays) -> float:
    """µs per call of one config (NaN when it needs more resources than the GPU has)."""
    from triton.runtime.errors import OutOfResources

    from kernels import fused_moe

    try:
        return _time(
            lambda: fused_moe(a, w, ids, config=config, out=out, check_ids=False), dev, calls, replays
        )
    except OutOfResources:
        return float("nan")


def _dense_us(rows: int, layer, dev, dt, calls, replays) -> float:
    """µs of a dense [rows, K] x [K, N] matmul: the same FLOPs as the projection, no gather."""
    import torch

    x = torch.randn(rows, layer.hidden, device=dev).to(dt)
    y = torch.randn(layer.hidden, layer.n, device=dev).to(dt)
    return _time(lambda: torch.mm(x, y), dev, calls, replays)


def _time(fn, dev: str, calls: int, replays: int) -> float:
    """µs per call: the median of ``replays`` replays of a CUDA graph of ``calls`` calls (on the
    interpreter, of ``calls`` calls timed on the host)."""
    import torch

    fn()  # compile (from the cache the pool filled) and warm
    if dev != "cuda":
        samples = []
        for _ in range(replays):
            t = time.perf_counter()
            for _ in range(calls):
                fn()
            samples.append((time.perf_counter() - t) * 1e6 / calls)
        return statistics.median(samples)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    samples = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / calls)
    del graph
    return statistics.median(samples)


def _precompile(layer, configs, workers: int) -> None:
    """Every config compiled into the Triton cache by ``workers`` processes (spawned: CUDA does not
    survive a fork), each compiling without launching (JITFunction.warmup)."""
    ctx = get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(configs)), mp_context=ctx) as pool:
        list(pool.map(_compile_one, [(layer, c) for c in configs]))


def _compile_one(job) -> None:
    import torch
    from triton.runtime.errors import OutOfResources

    from kernels import compile_moe

    layer, config = job
    try:
        compile_moe(getattr(torch, layer.dtype), layer.hidden, layer.n, layer.top_k, config)
    except OutOfResources:
        pass  # recorded as NaN when the benchmark launches it


def _device_name(dev: str) -> str:
    import torch

    return torch.cuda.get_device_name() if dev == "cuda" else "interpreter"


def best(rows: list[dict]) -> tuple[dict[int, str], str]:
    """(M -> the fastest config's id, the best single config's id: least mean slowdown over M)."""
    import pandas as pd

    df = pd.DataFrame(rows).dropna(subset=["us"])
    if df.empty:
        raise ValueError("tune: no config ran at any M")
    fastest = df.loc[df.groupby("m")["us"].idxmin()].set_index("m")["candidate"].to_dict()
    slowdown = df["us"] / df.groupby("m")["us"].transform("min")
    full = df.assign(slowdown=slowdown).groupby("candidate").filter(lambda g: len(g) == df["m"].nunique())
    single = full.groupby("candidate")["slowdown"].mean().idxmin()
    return {int(m): c for m, c in fastest.items()}, str(single)


def write(result: dict, choice: tuple[dict[int, str], str], out: Path, layer) -> dict[str, Path]:
    """The table and best single config of ``choice`` (``best``'s) and tune.parquet under ``out``."""
    import pandas as pd

    from headroom.families.tables import config_id, write_config_table

    out.mkdir(parents=True, exist_ok=True)
    by_id = {config_id(c): c for c in result["configs"]}
    fastest, single = choice
    table = out / layer.table_name(result["device"])
    write_config_table(table, {m: by_id[c] for m, c in fastest.items()})
    single_path = table.with_suffix(".single.json")
    single_path.write_text(json.dumps(by_id[single], indent=4) + "\n")
    frame = pd.DataFrame(result["rows"]).assign(device=result["device"], compile_s=result["seconds"]["compile"],
                                                 total_s=result["seconds"]["total"])  # fmt: skip
    frame.to_parquet(out / "tune.parquet", index=False)
    return {"table": table, "single": single_path, "timings": out / "tune.parquet"}


def summary(result: dict, choice: tuple[dict[int, str], str], paths: dict[str, Path]) -> list[str]:
    import pandas as pd

    df = pd.DataFrame(result["rows"])
    fastest, single = choice
    s = result["seconds"]
    lines = [f"tuned {df['candidate'].nunique()} configs x {df['m'].nunique()} M on {result['device']} "
             f"in {s['total']:.1f} s (compile {s['compile']:.1f} s); best single config {single}",
             f"  {'M':>6} {'fastest':<28} {'us':>9} {'TFLOP/s':>8} {'dense':>8} {'single us':>9}"]  # fmt: skip
    for m, cid in fastest.items():
        r = df[(df["m"] == m) & (df["candidate"] == cid)].iloc[0]
        su = df[(df["m"] == m) & (df["candidate"] == single)]["us"].iloc[0]
        lines.append(f"  {m:>6} {cid:<28} {r.us:>9.1f} {r.tflops:>8.1f} {r.dense_tflops:>8.1f} {su:>9.1f}")
    lines += [f"wrote {p}" for p in paths.values()]
    return lines
