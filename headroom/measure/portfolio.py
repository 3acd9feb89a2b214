"""What every portfolio run shares, whatever the family: its settings (config `portfolio:` and the
adaptive sampler's stop rules), the modes it times, each invocation's seeded candidate order, the
run's facts (the device's name, the Triton cache dir, the SM clock), the harness floor (an empty
Triton kernel timed as a candidate is, carried as columns, never as a candidate) and the samples
table. The built-in attention family's run is headroom.families.attention.portfolio; a kernel
family's, headroom.measure.family_runs.portfolio.

Samples (``portfolio/run-{run}-samples.parquet``), one per timed sample:
    run, mode, invocation, candidate, rep, position, latency_us, calls (kernel calls averaged).
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import pandas as pd

from headroom.core import defaults
from headroom.core import settings as stage_settings
from headroom.measure import timing

_FLOOR_WARMUP_CALLS = 3


def settings(section: dict[str, Any] | None) -> dict[str, Any]:
    """The `portfolio:` config section merged onto the default study's; ValueError names a bad key."""
    # the schema's integer bounds; max_buffer_sets >= 2: rotation needs two sets (timing.buffer_sets)
    cfg = stage_settings.checked("portfolio", section, defaults.int_minimums("portfolio"))
    if cfg["mode"] not in ("eager", "graph", "both"):
        raise ValueError(f"portfolio.mode must be eager, graph or both, got {cfg['mode']!r}")
    if type(cfg["flush_l2"]) is not bool:
        raise ValueError(f"portfolio.flush_l2 must be true or false, got {cfg['flush_l2']!r}")
    if type(cfg["work_us"]) not in (int, float) or not cfg["work_us"] >= 0:
        raise ValueError(f"portfolio.work_us must be a number >= 0, got {cfg['work_us']!r}")
    for key in ("working_set_l2", "floor_factor"):
        if not isinstance(cfg[key], int | float) or not cfg[key] > 0:
            raise ValueError(f"portfolio.{key} must be a positive number, got {cfg[key]!r}")
    if cfg["sampler"] not in SAMPLERS:
        raise ValueError(f"portfolio.sampler must be one of {SAMPLERS}, got {cfg['sampler']!r}")
    cfg["adaptive"] = _adaptive(cfg["adaptive"])
    stop_rules(cfg)  # refuses a bad adaptive section even while the fixed sampler is chosen
    return cfg


SAMPLERS = ("fixed", "adaptive")
_PER_MODE = ("target_rse_pct", "min_samples", "max_samples")


def _adaptive(section: dict[str, Any] | None) -> dict[str, Any]:
    """`portfolio.adaptive` merged key by key (and mode by mode) onto the default study's."""
    base = stage_settings.merge("portfolio.adaptive", defaults.section("portfolio")["adaptive"], section)
    for key in _PER_MODE:
        if not isinstance(base[key], dict):
            raise ValueError(
                f"portfolio.adaptive.{key} must map eager and graph to values, got {base[key]!r}"
            )
        base[key] = stage_settings.merge(
            f"portfolio.adaptive.{key}", defaults.section("portfolio")["adaptive"][key], base[key]
        )
    return base


def stop_rules(cfg: dict[str, Any]) -> dict[str, timing.StopRule]:
    """{mode: StopRule} of the adaptive sampler from a settings() dict; {} for the fixed sampler.
    ValueError names the bad `portfolio.adaptive` key."""
    a = cfg["adaptive"]
    for key in ("min_time_s", "max_time_s"):
        if isinstance(a[key], bool) or not isinstance(a[key], int | float):
            raise ValueError(f"portfolio.adaptive.{key} must be a number, got {a[key]!r}")
    rules = {}
    for mode in timing.MODES:
        values = {key: a[key][mode] for key in _PER_MODE}
        if any(isinstance(v, bool) or not isinstance(v, int | float) for v in values.values()):
            raise ValueError(f"portfolio.adaptive: {mode} values must be numbers, got {values}")
        try:
            rules[mode] = timing.StopRule(**values, min_time_s=a["min_time_s"], max_time_s=a["max_time_s"])
        except ValueError as e:
            raise ValueError(f"portfolio.adaptive ({mode}): {e}") from None
    return rules if cfg["sampler"] == "adaptive" else {}


def modes_for(mode: str, device: str) -> tuple[str, ...]:
    """Modes a run times: graph needs CUDA, so without it only eager runs."""
    wanted = ("eager", "graph") if mode == "both" else (mode,)
    if device != "cuda":
        return ("eager",)
    return wanted


def candidate_order(n: int, *, seed: int, run: int, index: int) -> np.ndarray:
    """Timing order of ``n`` candidates at the ``index``-th invocation of run ``run``: a seeded
    permutation rotated so that candidate ``(index + run) % n`` goes first. Every candidate leads
    equally often, consecutive invocations never start with the same candidate (n > 1), and who
    follows whom changes from one invocation to the next."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    perm = np.random.default_rng([seed, run, index]).permutation(n)
    first = (index + run) % n
    return np.roll(perm, -int(np.flatnonzero(perm == first)[0]))


# -- run facts ------------------------------------------------------------------------------------


def device_name(device: str) -> str:
    if device != "cuda":
        return "cpu (triton interpreter)"
    import torch

    return torch.cuda.get_device_name(torch.cuda.current_device())


def triton_cache_dir() -> str:
    try:
        import triton

        return str(triton.knobs.cache.dir)
    except (ImportError, AttributeError):
        return os.environ.get("TRITON_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".triton", "cache"))


class SmClock:
    """The current device's SM clock in MHz through NVML (nvidia-ml-py); NaN when unreadable."""

    def __init__(self, device: str):
        self._handle = None
        self._nvml = None
        if device != "cuda":
            return
        try:
            import pynvml
            import torch

            pynvml.nvmlInit()
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            try:
                bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
                self._handle = pynvml.nvmlDeviceGetHandleByPciBusId(bus.encode())
            except Exception:  # older torch without PCI ids, or a bus id NVML does not know
                self._handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
            self._nvml = pynvml
        except Exception:  # no nvidia-ml-py or no NVML: the column stays NaN
            self._handle = None

    def read(self) -> float:
        if self._handle is None:
            return math.nan
        try:
            return float(self._nvml.nvmlDeviceGetClockInfo(self._handle, self._nvml.NVML_CLOCK_SM))
        except Exception:
            return math.nan


def measure_floor(
    harness: timing.Harness, modes: tuple[str, ...], device: str
) -> tuple[dict[str, float], float]:
    """The empty Triton kernel timed by the harness in each mode: {mode: median us}, and the
    launch cost of a one-call graph (NaN without CUDA)."""
    import torch

    from kernels import empty_kernel_launch

    anchor = torch.empty(16, device="cuda" if device == "cuda" else "cpu")
    for _ in range(_FLOOR_WARMUP_CALLS):  # compile it and warm the launch path even when warmup_reps is 0
        empty_kernel_launch(anchor)
    floor = {m: float(np.median(harness.time(m, empty_kernel_launch, [(anchor,)]).samples_us)) for m in modes}
    launch = harness.graph_launch_us(empty_kernel_launch, (anchor,)) if device == "cuda" else math.nan
    return floor, launch


# -- the samples ----------------------------------------------------------------------------------


def samples_frame(run: int, parts: list[tuple]) -> pd.DataFrame:
    """The samples table (module docstring) of (mode, invocation, candidate, position, latencies,
    calls) cells: rep counts 0.. within each cell."""
    sizes = np.array([p[4].size for p in parts], dtype=np.int64)
    starts = np.repeat(np.cumsum(sizes) - sizes, sizes)

    def each(i: int) -> np.ndarray:  # field i of every cell, once per sample
        return np.repeat(np.array([p[i] for p in parts]), sizes)

    return pd.DataFrame(
        {
            "run": np.full(int(sizes.sum()), run, dtype=np.int64),
            "mode": each(0),
            "invocation": each(1).astype(np.int64),
            "candidate": each(2),
            "rep": np.arange(int(sizes.sum()), dtype=np.int64) - starts,
            "position": each(3).astype(np.int64),
            "latency_us": np.concatenate([p[4] for p in parts]).astype(np.float64),
            "calls": each(5).astype(np.int64),
        }
    )
