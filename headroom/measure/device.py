"""What a device rule (a job that runs kernels: environment, correctness, portfolio, lifecycle,
graph_sweep, calibrate) adds to the stage harness: the GPU check before it starts and the
environment id and placement in its artifacts' provenance.

Its scripts pass this module to the harness, ``run_stage(snakemake, main, device=device)``, so the
rules that run anywhere (trace, analysis, report, catalog) never import torch.
"""

from __future__ import annotations

import platform
from typing import Any


def check(study: str, device: str) -> None:
    """A GPU job placed on a node without a GPU fails instead of adapting (CPU jobs run anywhere)."""
    if device != "cuda":
        return
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(
            f"study {study!r} runs on device 'cuda' but this job landed on {platform.node()}, where "
            "torch sees no CUDA device: give GPU rules GPU nodes (the study's `slurm:` section, or the "
            "cluster's partition for `gpu` jobs)"
        )


def provenance(device: str) -> dict[str, Any]:
    """The environment id (GPU model, driver, versions) and placement (host, bus id) of this job."""
    if device not in ("cuda", "interpret"):
        return {}
    from headroom.measure import environment

    row = environment.describe(device)
    return {"environment": row["environment_id"], "placement": environment.placement(row)}
