"""What machine the measurements were made on: GPU, SMs, L2, memory, driver, CUDA and versions."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
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
    # A short stable id of the machine+software, carried by every measurement's provenance.
    ident = "|".join(str(row[k]) for k in sorted(row))
    row["environment_id"] = blake3.blake3(ident.encode()).hexdigest()[:16]
    return row
