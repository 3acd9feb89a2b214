# Shared by all rule files -- the resolved study, the artifact registry, and source-file inputs.
import glob
import sys
from pathlib import Path

# `headroom` and `kernels` import from this checkout -- here and in every job's script process
# (they inherit the environment), installed or not.
sys.path.insert(0, workflow.basedir)

from headroom.core import config as hconfig

hconfig.make_importable(workflow.basedir)

try:
    STUDY = hconfig.resolve(config)
except hconfig.ConfigError as exc:
    raise WorkflowError(f"invalid configuration: {exc}")

DEVICE = STUDY["device"]  # "cuda" | "interpret" | "replay"
REPLAY = STUDY.get("replay")
R = "results"

if REPLAY:
    RUNS = sorted(
        int(Path(p).stem.split("-")[1])
        for p in glob.glob(f"{REPLAY}/portfolio/run-*.parquet")
        if not p.endswith("-samples.parquet")
    )
    if not RUNS:
        raise WorkflowError(f"replay directory {REPLAY} has no portfolio/run-*.parquet")
else:
    RUNS = list(range(1, STUDY["portfolio"]["runs"] + 1))

# Every Parquet artifact, registered where its rule declares it; the catalog reads this list, so a
# stage added later is catalogued without touching the catalog rule.
ARTIFACTS = []


def artifact(pattern, **wildcards):
    """Register an artifact path (expanded over `wildcards`, if any) and return the pattern."""
    ARTIFACTS.extend(expand(pattern, **wildcards) if wildcards else [pattern])
    return pattern


# Source files every stage runs through (the write path and the script harness).
COMMON_CODE = ["headroom/__init__.py", "headroom/core/artifacts.py", "headroom/core/stage.py"]


def src(*paths):
    """Source files a rule depends on, declared as inputs so an edit reruns the rule
    (Snakemake tracks only the script file of a `script:` rule, not the modules it imports)."""
    return COMMON_CODE + list(paths)


KERNEL_CODE = sorted(glob.glob("kernels/*.py"))
