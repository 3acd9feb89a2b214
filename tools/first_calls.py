"""Where a portfolio run's eager warm-up goes: each native's first and second call on every
invocation of a study's trace, in the run's order, in one process, synchronized around each call,
with the seconds FlexAttention's block-mask builds (runner.flex_block_mask) took inside the first
call. (At 42d0459, before that builder, this tool timed torch's create_block_mask: the `old`
passes of data/checks/h200/2026-12-05-session23.)

    python3 tools/first_calls.py --results results/default --out first_calls.csv [--backends flex,sdpa-cudnn]

A portfolio run is a fresh process whose Triton and Inductor caches the correctness stage filled:
run this once to fill them (its figures include compiles), then again for the figures a run sees.
Rows: invocation, phase, batch, q_len, kv_len, backend, first_ms, second_ms, mask_ms (block masks
built in the first call, FlexAttention only). Without CUDA (a check of the script) the natives run
eagerly on the CPU, as the Triton interpreter's studies run them.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from headroom.core import defaults  # noqa: E402
from headroom.families.attention import inputs  # noqa: E402
from headroom.families.attention.portfolio import candidate_fn  # noqa: E402


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


class _MaskClock:
    """The runner's block-mask builder (runner.flex_block_mask, which it looks up at each build)
    wrapped to add its synchronized seconds to ``seconds``."""

    def __init__(self):
        from headroom.families.attention import runner

        self.seconds, self._real = 0.0, runner.flex_block_mask
        runner.flex_block_mask = self

    def __call__(self, *args, **kwargs):
        _sync()
        t0 = time.perf_counter()
        mask = self._real(*args, **kwargs)
        _sync()
        self.seconds += time.perf_counter() - t0
        return mask


def _timed(fn, args) -> float:
    _sync()
    t0 = time.perf_counter()
    fn(*args)
    _sync()
    return 1e3 * (time.perf_counter() - t0)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", required=True, help="a study's results folder (trace and candidates)")
    p.add_argument("--out", required=True, help="CSV written here")
    p.add_argument("--backends", default="flex,sdpa-cudnn", help="natives' backends, comma-separated")
    p.add_argument("--limit", type=int, default=0, help="the first N invocations only (0: all)")
    args = p.parse_args(argv)
    import torch

    device = "cuda" if torch.cuda.is_available() else "interpret"
    results = Path(args.results)
    trace = pd.read_parquet(results / "trace.parquet").sort_values("invocation", kind="mergesort")
    trace = trace.head(args.limit) if args.limit > 0 else trace
    cands = pd.read_parquet(results / "candidates.parquet")
    wanted = [f"native-{b}" for b in args.backends.split(",")]
    chosen = [c for c in cands.itertuples(index=False) if c.candidate in wanted]
    if len(chosen) != len(wanted):
        raise SystemExit(f"first_calls: {results}/candidates.parquet lacks one of {wanted}")
    clock = _MaskClock()
    tables = inputs.RopeTables(int(trace["kv_len"].max()), defaults.value("partition", "rope_base"), device)
    rows, t_start = [], time.perf_counter()
    for inv in trace.itertuples(index=False):
        sets = inputs.input_sets(inv, 2, device, seed=int(inv.invocation))
        cos, sin = tables.get(inv)
        rotate_k, kv_lens = inputs.rotate_k(inv), inputs.kv_lens_tensor(inv, device)
        for cand in chosen:
            fn = candidate_fn(cand, cos, sin, rotate_k, kv_lens)
            before = clock.seconds
            with fn.hold() if hasattr(fn, "hold") else contextlib.nullcontext():  # as the harness does
                first, second = _timed(fn, sets[0]), _timed(fn, sets[1])
            rows.append({
                "invocation": int(inv.invocation), "phase": inv.phase, "batch": int(inv.batch),
                "q_len": int(inv.q_len), "kv_len": int(inv.kv_len), "backend": cand.backend,
                "first_ms": first, "second_ms": second, "mask_ms": 1e3 * (clock.seconds - before),
            })  # fmt: skip
    out = pd.DataFrame(rows)
    out.to_csv(args.out, index=False)
    summary = out.groupby(["backend", "phase"])[["first_ms", "second_ms", "mask_ms"]].agg(["sum", "median"])
    print(f"{len(trace)} invocations in {time.perf_counter() - t_start:.1f} s; milliseconds:")
    print(summary.round(2).to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
