"""The request log a study names (`trace.source`), checked where the plan runs, before any job.

The plan (rules/common.smk) hands `check` to `headroom.core.config.plan_studies`, so core never
imports this floor: a missing file, a directory, a FIFO or device, an unreadable or empty file, a
name that is not a request log's or a header without the mapped columns is refused there, and
Snakemake never deletes the old trace for a job that cannot run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from headroom.trace import invocations, requests


def check(trace_cfg: dict[str, Any], base_dir: str | os.PathLike = ".") -> Path | None:
    """The request log of a study's `trace:` section (None: synthetic), checked without reading its
    rows; ValueError naming the file and what it is. Relative paths: from base_dir (the project
    root, where Snakemake and the trace job run). A log outside the project is allowed (logs live
    on data disks); its BLAKE3 is recorded in the trace's provenance."""
    if trace_cfg.get("source", "synthetic") == "synthetic":
        return None  # (an installed wheel validates such a study without the default config)
    cfg = invocations.settings(trace_cfg)
    requests.check_arrival_format(cfg["arrival_format"])
    path = invocations.resolve_source(cfg["source"], base_dir)
    requests.check_log(path, cfg["columns"])
    return path
