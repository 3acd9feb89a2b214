"""What machine the measurements were made on: GPU, SMs, L2, memory, driver, CUDA and versions."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any

import blake3

from headroom.core.stage import package_versions


def _driver_version() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
        return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def describe(device: str) -> dict[str, Any]:
    """One row describing this machine. `device` is the resolved study device."""
    versions = package_versions()
    row: dict[str, Any] = {
        "device": device,
        "hostname": socket.gethostname(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count() or 0,
        "python": versions["python"],
        "torch": versions["torch"],
        "triton": versions["triton"],
        "gpu_name": "none (Triton interpreter on the CPU)",
        "compute_capability": "",
        "sm_count": 0,
        "l2_bytes": 0,
        "memory_bytes": 0,
        "driver": "none",
        "cuda": "none",
        "bus_id": "none",
    }
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError(
                "device is 'cuda' but torch sees no CUDA device; set device: interpret or auto"
            )
        props = torch.cuda.get_device_properties(0)
        row.update(
            gpu_name=props.name,
            compute_capability=f"{props.major}.{props.minor}",
            sm_count=int(props.multi_processor_count),
            l2_bytes=int(getattr(props, "L2_cache_size", 0)),
            memory_bytes=int(props.total_memory),
            driver=_driver_version(),
            cuda=str(torch.version.cuda),
        )
        # where the GPU sits: placement, not identity (a study may span identical GPUs)
        bus = [getattr(props, f"pci_{k}_id", None) for k in ("domain", "bus", "device")]
        row["bus_id"] = "{:04x}:{:02x}:{:02x}".format(*bus) if None not in bus else "unknown"
    row.update(flashinfer_facts())
    row["environment_id"] = environment_id(row)
    return row


#: The environment's FlashInfer columns ('none' where it is not installed).
FLASHINFER_FACTS = ("flashinfer", "flashinfer_jit_dir", "flashinfer_jit_blake3")


def flashinfer_facts() -> dict[str, str]:
    """FlashInfer's version, its JIT cache directory and the cache's identity (BLAKE3 of the built
    modules' relative paths and sizes: 'empty' before its first compile), or 'none' where it is not
    installed (the `flashinfer` extra)."""
    import importlib.util

    if importlib.util.find_spec("flashinfer") is None:
        return dict.fromkeys(FLASHINFER_FACTS, "none")
    import flashinfer
    from flashinfer.jit import env

    jit = Path(env.FLASHINFER_JIT_DIR)
    built = sorted(jit.rglob("*.so")) if jit.is_dir() else []
    ident = "\n".join(f"{p.relative_to(jit)}\t{p.stat().st_size}" for p in built)
    return {
        "flashinfer": str(flashinfer.__version__),
        "flashinfer_jit_dir": str(jit),
        "flashinfer_jit_blake3": blake3.blake3(ident.encode()).hexdigest()[:16] if built else "empty",
    }


#: What makes two devices interchangeable for one study's measurements: the GPU model, driver and
#: software versions. Not the host or bus id: a study may span identical GPUs.
IDENTITY = (
    "device",
    "gpu_name",
    "compute_capability",
    "sm_count",
    "l2_bytes",
    "memory_bytes",
    "driver",
    "cuda",
    "python",
    "torch",
    "triton",
)


def environment_id(row: dict[str, Any]) -> str:
    """A short stable id of the device and software, carried by every measurement's provenance.
    FlashInfer's version enters it where it is installed (so the ids of environments without it
    are the ones recorded before it was a candidate)."""
    keys = IDENTITY + (("flashinfer",) if row.get("flashinfer", "none") != "none" else ())
    ident = "|".join(f"{k}={row[k]}" for k in keys)
    return blake3.blake3(ident.encode()).hexdigest()[:16]


def placement(row: dict[str, Any]) -> dict[str, str]:
    """Where a job ran: recorded beside the environment id, never part of it."""
    return {"host": str(row["hostname"]), "bus_id": str(row.get("bus_id", "none"))}
