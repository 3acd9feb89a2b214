"""calibrate: the machine's real ceilings, each measured in the regime it describes.

One row per constant; the names are the ones headroom.analysis.roofline reads:
- hbm_bytes_per_s: device-to-device copy of ``hbm_copy_l2`` x L2 per side (bytes read + written
  over the median copy time); working set far beyond L2, regime 'hbm'.
- l2_bytes_per_s: the same copy with source + destination = ``l2_copy_l2`` x L2, repeated
  back-to-back inside a CUDA graph (one copy is too short to time against launch overhead);
  regime 'l2-resident'.
- launch_eager_us: an empty Triton kernel per call, eager, timed by the portfolio's harness.
- launch_graph_us: the same kernel per call inside a graph of ``graph_calls`` launches.
- graph_launch_us: replay of a graph holding one empty kernel (the graph's own launch cost).
- matmul_flops_per_s: bfloat16 ``matmul_n``-cube product (2 n^3 FLOP) on random normal data.
- l2_bytes: the L2 size as the device reports it.

Columns: name, value, unit ('bytes/s', 'us', 'flop/s', 'bytes'), working_set_bytes, regime
('hbm' | 'l2-resident' | 'launch' | 'compute' | 'device'), method, reps, status ('ok' |
'skipped'), reason, device, device_name, sm_clock_mhz (NVML, after the constant; NaN unreadable).
Without CUDA every row is 'skipped' with the reason and no value.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import pandas as pd

from headroom.core import contracts, defaults
from headroom.core import settings as stage_settings
from headroom.measure import portfolio, timing

# What calibrate measures, its unit and its regime: tables, so laid out by hand (hence fmt: skip).
NAMES = ("hbm_bytes_per_s", "l2_bytes_per_s", "launch_eager_us", "launch_gpu_us", "launch_triton_host_us",
         "launch_host_us", "launch_graph_us", "graph_launch_us", "matmul_flops_per_s", "l2_bytes")  # fmt: skip
UNITS = {"hbm_bytes_per_s": "bytes/s", "l2_bytes_per_s": "bytes/s", "launch_eager_us": "us", "launch_graph_us": "us",
         "launch_gpu_us": "us", "launch_triton_host_us": "us", "launch_host_us": "us",
         "graph_launch_us": "us", "matmul_flops_per_s": "flop/s", "l2_bytes": "bytes"}  # fmt: skip
REGIMES = {"hbm_bytes_per_s": "hbm", "l2_bytes_per_s": "l2-resident", "launch_eager_us": "launch",
           "launch_gpu_us": "launch", "launch_triton_host_us": "launch", "launch_host_us": "launch",
           "launch_graph_us": "launch", "graph_launch_us": "launch", "matmul_flops_per_s": "compute",
           "l2_bytes": "device"}  # fmt: skip
COLUMNS = list(contracts.CALIBRATION.names)


def settings(section: dict[str, Any] | None) -> dict[str, Any]:
    cfg = stage_settings.checked("calibrate", section, defaults.int_minimums("calibrate"))
    if not cfg["hbm_copy_l2"] > 1:
        raise ValueError(
            f"calibrate.hbm_copy_l2 must be > 1 (the copy must spill the L2), got {cfg['hbm_copy_l2']!r}"
        )
    if not 0 < cfg["l2_copy_l2"] < 1:
        raise ValueError(
            f"calibrate.l2_copy_l2 must be in (0, 1) (the copy must fit the L2), got {cfg['l2_copy_l2']!r}"
        )
    return cfg


def _frame(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame.from_records(rows, columns=COLUMNS)
    df["value"] = df["value"].astype("float64")
    df["sm_clock_mhz"] = df["sm_clock_mhz"].astype("float64")
    df["working_set_bytes"] = df["working_set_bytes"].astype("Int64")
    df["reps"] = df["reps"].astype("Int64")
    return df


def _skipped(device: str) -> pd.DataFrame:
    reason = "no CUDA device: the interpreter has no memory hierarchy or launch path to calibrate"
    rows = [
        {
            "name": n,
            "value": math.nan,
            "unit": UNITS[n],
            "regime": REGIMES[n],
            "status": "skipped",
            "reason": reason,
            "device": device,
            "device_name": portfolio.device_name(device),
        }
        for n in NAMES
    ]
    return _frame(rows)


def run(section: dict[str, Any], *, device: str, log: logging.Logger | None = None) -> pd.DataFrame:
    """Calibration rows (module docstring)."""
    log = log or logging.getLogger("headroom.measure.calibrate")
    cfg = settings(section)
    if device != "cuda":
        return _skipped(device)
    import torch

    l2 = timing.l2_bytes()
    rec = _Recorder(device, log)
    eager = timing.Harness("cuda", warmup=cfg["warmup_reps"], reps=cfg["reps"])
    graph = timing.Harness(
        "cuda",
        warmup=cfg["warmup_reps"],
        reps=cfg["reps"],
        graph_calls=cfg["graph_calls"],
        replays=cfg["reps"],
    )
    _copies(rec, cfg, l2, eager, graph)
    _launches(rec, cfg, eager, graph)
    _matmul(rec, cfg)
    rec.add("l2_bytes", l2, None, "torch.cuda.get_device_properties().L2_cache_size", 0)
    torch.cuda.empty_cache()
    return _frame(rec.rows)


class _Recorder:
    """Collects one row per calibrated figure, stamped with the device and its SM clock."""

    def __init__(self, device: str, log: logging.Logger):
        self.device, self.log, self.rows = device, log, []
        self.clock = portfolio.SmClock(device)
        self.device_name = portfolio.device_name(device)

    def add(self, name: str, value: float, working_set: int | None, method: str, reps: int) -> None:
        self.rows.append(
            {
                "name": name,
                "value": float(value),
                "unit": UNITS[name],
                "working_set_bytes": working_set,
                "regime": REGIMES[name],
                "method": method,
                "reps": reps,
                "status": "ok",
                "reason": "",
                "device": self.device,
                "device_name": self.device_name,
                "sm_clock_mhz": self.clock.read(),
            }
        )
        self.log.info("calibrate %-20s %.4g %s (working set %s bytes)", name, value, UNITS[name], working_set)


def _median_us(harness: timing.Harness, mode: str, fn, args: tuple) -> float:
    return float(np.median(harness.time(mode, fn, [args]).samples_us))


def _copies(rec: _Recorder, cfg: dict[str, Any], l2: int, eager, graph) -> None:
    import torch

    # HBM: fp32 elements; a copy reads n and writes n bytes.
    n = int(cfg["hbm_copy_l2"] * l2) // 4
    src = torch.randn(n, device="cuda")
    t = _median_us(eager, "eager", lambda s, d: d.copy_(s), (src, torch.empty_like(src)))
    rec.add(
        "hbm_bytes_per_s",
        2 * 4 * n / (t * 1e-6),
        2 * 4 * n,
        "torch copy_ d2d, eager, CUDA events",
        cfg["reps"],
    )
    del src
    # L2: the same buffers over and over inside one graph, so they stay resident.
    n = int(cfg["l2_copy_l2"] * l2) // 8
    src = torch.randn(n, device="cuda")
    t = _median_us(graph, "graph", lambda s, d: d.copy_(s), (src, torch.empty_like(src)))
    method = f"torch copy_ d2d, {cfg['graph_calls']} per CUDA graph replay"
    rec.add("l2_bytes_per_s", 2 * 4 * n / (t * 1e-6), 2 * 4 * n, method, cfg["reps"])


def _launches(rec: _Recorder, cfg: dict[str, Any], eager, graph) -> None:
    """Launch overheads: the harness floor, in both modes."""
    import torch

    from kernels import empty_kernel_launch

    anchor = torch.empty(16, device="cuda")
    reps = cfg["reps"]
    # the harness floor as recorded before decision v4: back to back, the host's launch path included
    floor = timing.Harness("cuda", warmup=cfg["warmup_reps"], reps=reps, eager_method="back-to-back")
    t = _median_us(floor, "eager", empty_kernel_launch, (anchor,))
    rec.add("launch_eager_us", t, 0, "empty Triton kernel, eager, CUDA events per call, back to back", reps)
    m = eager.time("eager", empty_kernel_launch, [(anchor,)])
    rec.add(
        "launch_gpu_us", float(np.median(m.samples_us)), 0, "empty Triton kernel, eager on a busy GPU", reps
    )
    rec.add("launch_triton_host_us", m.host_us, 0, "empty Triton kernel: host enqueue per call", reps)
    # what one of a decoder layer's other kernels costs the host (headroom/families/attention/layer.py): a
    # torch matmul's enqueue, on operands too small for its GPU time to matter
    small = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    m = eager.time("eager", torch.matmul, [(small, small)])
    rec.add("launch_host_us", m.host_us, 0, "torch.matmul 64^2 bf16: host enqueue per call", reps)
    t = _median_us(graph, "graph", empty_kernel_launch, (anchor,))
    rec.add("launch_graph_us", t, 0, f"empty Triton kernel, {cfg['graph_calls']} per CUDA graph replay", reps)
    t = graph.graph_launch_us(empty_kernel_launch, (anchor,))
    rec.add("graph_launch_us", t, 0, "replay of a CUDA graph holding one empty Triton kernel", reps)


def _matmul(rec: _Recorder, cfg: dict[str, Any]) -> None:
    """Matmul rate: bf16 on random data (zeros run faster than real data)."""
    import torch

    mn = cfg["matmul_n"]
    a = torch.randn(mn, mn, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(mn, mn, device="cuda", dtype=torch.bfloat16)
    mm = timing.Harness("cuda", warmup=cfg["warmup_reps"], reps=cfg["reps"])
    t = _median_us(mm, "eager", torch.matmul, (a, b))
    rec.add(
        "matmul_flops_per_s",
        2 * mn**3 / (t * 1e-6),
        3 * mn * mn * 2,
        f"torch.matmul bf16 {mn}^3, eager",
        cfg["reps"],
    )
