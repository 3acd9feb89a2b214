"""How eager calls are timed, checked on the GPU: per call, the back-to-back eager figure (the method
before decision v4), the spin method's GPU time, CUDA graph replay, and the host's enqueue time, for
our q_fused kernel and for cuDNN SDPA with its backend chosen per call and once, through the
project's own harness (headroom/measure/timing.py) and runner.

    python3 tools/eager_timing_check.py OUTDIR      # on a CUDA host; writes OUTDIR/eager_timing.{json,md}

Shapes: bf16, 32/8 heads, d128 (the default partition); a 64-token and a 4,096-token prefill and a
decode of 8 sequences x 2,048. A minute or two on an H200.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from headroom.core import defaults  # noqa: E402
from headroom.families.attention import candidates, inputs, runner  # noqa: E402
from headroom.measure import timing  # noqa: E402

SHAPES = {
    "prefill 64": ("prefill", 1, 64, 64),
    "prefill 4096": ("prefill", 1, 4096, 4096),
    "decode 8 x 2048": ("decode", 8, 1, 2048),
}
REPS, WARMUP, GRAPH_CALLS = 200, 20, 20


def _row(phase, batch, q_len, kv_len):
    part = defaults.section("partition")
    return SimpleNamespace(phase=phase, batch=batch, q_len=q_len, kv_len=kv_len, kv_lens=None, **part)


def _per_call_entry(fn):
    """The native with its backend chosen on every call (as the portfolio did before decision v4)."""

    def call(*args):
        return fn(*args)

    return call  # no `hold`: the runner enters `sdpa_kernel` per call


def measure(fn, sets) -> dict:
    back = timing.Harness("cuda", warmup=WARMUP, reps=REPS, eager_method="back-to-back")
    spin = timing.Harness("cuda", warmup=WARMUP, reps=REPS)
    graph = timing.Harness("cuda", warmup=WARMUP, reps=REPS, graph_calls=GRAPH_CALLS)
    s = spin.time("eager", fn, sets)
    return {
        "back_to_back_us": float(np.median(back.time("eager", fn, sets).samples_us)),
        "spin_gpu_us": float(np.median(s.samples_us)),
        "graph_us": float(np.median(graph.time("graph", fn, sets).samples_us)),
        "host_us": s.host_us,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    args = ap.parse_args(argv)
    if not timing.cuda_available():
        raise SystemExit("eager_timing_check: needs a CUDA GPU (this machine has none)")
    cfg = defaults.section("partition")
    tiles = defaults.study()["tiles"]
    cands = candidates.build(tiles, ["q_fused"], ["cudnn"])
    ours = next(c for c in cands.itertuples(index=False) if c.rope == "q_fused" and c.tile == 2)
    native = next(c for c in cands.itertuples(index=False) if c.backend == "sdpa-cudnn")
    cos, sin = runner.tables(8192, cfg["head_dim"], cfg["dtype"], cfg["rope_base"], "cuda")
    rows = []
    for name, shape in SHAPES.items():
        row = _row(*shape)
        sets = inputs.input_sets(row, 8, "cuda", seed=0)
        rotate_k = inputs.rotate_k(row)
        rows.append(
            {
                "shape": name,
                "candidate": ours.candidate,
                **measure(runner.runner(ours, cos, sin, rotate_k), sets),
            }
        )
        if name == "prefill 64":
            fn = runner.runner(native, cos, sin, rotate_k)
            rows.append({"shape": name, "candidate": "cudnn, backend once", **measure(fn, sets)})
            rows.append(
                {"shape": name, "candidate": "cudnn, backend per call", **measure(_per_call_entry(fn), sets)}
            )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "eager_timing.json").write_text(json.dumps(rows, indent=1))
    lines = [
        "| shape | candidate | back-to-back eager µs | spin GPU µs | graph replay µs | host enqueue µs |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['shape']} | {r['candidate']} | {r['back_to_back_us']:.1f} | {r['spin_gpu_us']:.1f} | "
            f"{r['graph_us']:.1f} | {r['host_us']:.1f} |"
        )
    (args.out / "eager_timing.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
