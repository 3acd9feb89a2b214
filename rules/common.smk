# Shared by all rule files -- the studies of this run (resolved once, here), the artifact registry,
# per-study params, resources and source-file inputs.
import functools
import glob
import json
import os
import re
import sys
from pathlib import Path

# `headroom` and `kernels` import from this checkout -- here and in every job's script process
# (they inherit the environment), installed or not.
sys.path.insert(0, workflow.basedir)

from headroom import dispatch as hdispatch
from headroom.core import artifacts as hartifacts
from headroom.core import config as hconfig
from headroom.core import replay as hreplay
from headroom.core import sources
from headroom.families import loading as hfloading
from headroom.families.attention import flashinfer as hflashinfer
from headroom.trace import source as htsource

hconfig.make_importable(workflow.basedir)
R = "results"
S = f"{R}/{{study}}"  # every artifact of a study lives under results/<study>/

try:
    if workflow.remote_exec:
        # A job on a cluster node re-reads this file: take the planning process's devices (passed
        # in the environment, which sbatch exports) instead of looking at this node's hardware.
        _recorded = json.loads(os.environ.get(hconfig.DEVICES_ENV, "{}"))
        STUDIES = hconfig.plan_studies(
            config,
            workflow.config_settings.config,
            recorded_devices=_recorded,
            check_source=htsource.check,
        )
    else:
        hconfig.check_results_dir(R)
        STUDIES = hconfig.plan_studies(config, workflow.config_settings.config, check_source=htsource.check)
        for _study in STUDIES.values():
            try:  # a CUDA study's FlashInfer candidates need FlashInfer installed here
                hflashinfer.require(_study)
            except ValueError as exc:
                raise hconfig.ConfigError(f"study {_study['name']!r}: {exc}") from None
            if _study.get("replay"):
                hreplay.check_recorded(_study["replay"], study=_study["name"])
                hreplay.check_imported(_study["replay"], f"{R}/{_study['name']}", study=_study["name"])
        os.environ[hconfig.DEVICES_ENV] = hconfig.devices_env(STUDIES)
    MEASURED_STUDIES = [n for n, s in STUDIES.items() if not s.get("replay")]
    REPLAY_STUDIES = [n for n, s in STUDIES.items() if s.get("replay")]
    GPU_OF = hconfig.gpu_assignment(MEASURED_STUDIES, config.get("local_gpus"))
except (hconfig.ConfigError, hreplay.ReplayError) as exc:
    raise WorkflowError(f"invalid configuration: {exc}")


def flashinfer_warm(wildcards):
    """The FlashInfer candidates of an attention study on CUDA, with the partition their JIT modules
    are built for (the environment stage builds them once: headroom.families.attention.flashinfer.warm);
    None where there are none."""
    study = STUDIES[wildcards.study]
    names = [n for n in study.get("native_candidates") or () if n in hflashinfer.BACKENDS]
    if study.get("family") is not None or study["device"] != "cuda" or not names:
        return None
    return {"backends": names, "partition": study["partition"]}


def one_of(names):
    """A wildcard constraint matching exactly these study names (none: matches nothing)."""
    return "|".join(re.escape(n) for n in names) if names else "(?!x)x"


def runs_of(name):
    study = STUDIES[name]
    if study.get("replay"):
        return hreplay.recorded_runs(study["replay"])
    return list(range(1, study["portfolio"]["runs"] + 1))


def cfg(*keys, default=None, pick=None):
    """A params function: the study's config at `keys` (the subset a rule reads), optionally only
    the `pick` keys of it; evaluated per job, so each study's edit reruns only its own jobs."""

    def value(wildcards):
        node = STUDIES[wildcards.study]
        for key in keys:
            if not isinstance(node, dict) or key not in node:
                return default
            node = node[key]
        return {k: v for k, v in node.items() if k in pick} if pick else node

    return value


def per_run(pattern):
    """Input function: `pattern` expanded over the study's portfolio runs."""
    return lambda wildcards: expand(pattern, study=wildcards.study, run=runs_of(wildcards.study))


# Every Parquet artifact, registered (as a pattern over {study} and {run}) where its rule declares
# it; the catalog and `all` read this list, so a stage added later is built and catalogued without
# touching them. MEASURED_ONLY: the patterns a replay study has none of (it imports what it replays).
ARTIFACTS = []
MEASURED_ONLY = set()


def register(pattern, measured_only=False):
    """Register an artifact pattern and return it."""
    if pattern not in ARTIFACTS:
        ARTIFACTS.append(pattern)
    if measured_only:
        MEASURED_ONLY.add(pattern)
    return pattern


def artifact(**named):
    """A rule's named artifact outputs (registered), each with its BLAKE3 sidecar as an output too:
    a deleted sidecar makes Snakemake rebuild the artifact, as a deleted artifact does."""
    out = {}
    for name, pattern in named.items():
        out[name] = register(pattern)
        out[f"{name}_blake3"] = f"{pattern}.blake3"
    return out


def measured_artifact(**named):
    """artifact(), for an artifact only a measured study makes (a replay's recorded folder has none)."""
    for pattern in named.values():
        register(pattern, measured_only=True)
    return artifact(**named)


def artifacts_of(name):
    """The study's artifacts; a replay's measured-only ones where its recorded folder has them
    (hreplay.OPTIONAL: a family study's steps)."""
    runs, replay = runs_of(name), STUDIES[name].get("replay")
    files = {p for pattern in ARTIFACTS for p in expand(pattern, study=name, run=runs)}
    if replay:
        recorded = {f"{R}/{name}/{n}" for n in hreplay.recorded_names(replay)}
        measured_only = {p for pattern in MEASURED_ONLY for p in expand(pattern, study=name, run=runs)}
        files -= measured_only - recorded
    return sorted(files)


def src(script, *extra):
    """The source files a rule runs, as inputs so an edit reruns the rule (Snakemake tracks only the
    script file of a `script:` rule): the script's import closure within headroom/ and kernels/
    (headroom/core/sources.py), plus `extra` files it reads (templates) or hashes (kernels/deploy.py)."""
    return list(dict.fromkeys([*sources.closure(script), *extra]))


# Resources: GPU rules take the `gpu` resource (one at a time with --resources gpu=1) and, with
# config local_gpus, the resource of their study's GPU (gpu_<index>=1, so one study's jobs never
# share its GPU; headroom/core/stage.py sets CUDA_VISIBLE_DEVICES from it). On Slurm, a study's
# `slurm:` section asks for its GPU model.
LOCAL_GPUS = sorted({g for g in GPU_OF.values() if g is not None})


def _slurm(key, unset=""):
    """A study's `slurm:` value as the Slurm executor plugin's resource of that name; `unset` when
    the study sets none (None for constraint and qos: the plugin passes an empty string on)."""
    return lambda wildcards: STUDIES[wildcards.study].get("slurm", {}).get(key, unset)


GPU_RESOURCES = {
    "gpu": 1,
    "gpu_model": _slurm("gpu_model"),
    "constraint": _slurm("constraint", None),
    "qos": _slurm("qos", None),
    "slurm_extra": _slurm("slurm_extra"),
    **{f"gpu_{g}": (lambda wildcards, g=g: int(GPU_OF.get(wildcards.study) == g)) for g in LOCAL_GPUS},
}
for _g in LOCAL_GPUS:
    # one job at a time on each GPU unless --resources says otherwise
    workflow.global_resources.setdefault(f"gpu_{_g}", 1)


def device(wildcards):
    return STUDIES[wildcards.study]["device"]


KERNEL_CODE = sorted(glob.glob("kernels/**/*.py", recursive=True))


# Per-study inputs and params of single rules.
from headroom.trace.invocations import resolve_source


def trace_source(wildcards):
    """The request log is an input (its BLAKE3 lands in the provenance); the synthetic source has
    none. The plan has checked it (headroom.trace.source.check, passed to plan_studies)."""
    source = resolve_source(STUDIES[wildcards.study]["trace"].get("source", "synthetic"))
    return [str(source)] if source else []


@functools.cache
def _blake3(path):
    return hartifacts.hash_file(path)


def trace_source_blake3(wildcards):
    """A params function: the request log's BLAKE3, hashed at plan time, so a log whose content
    changed reruns its study's trace (and what is made from it) even when its mtime is older than
    the trace (a checkout, `cp -p`); None for the synthetic source."""
    source = trace_source(wildcards)
    return _blake3(source[0]) if source else None


def family_param(wildcards):
    """A params function: the study's kernel family (config `family`) and the device it is loaded for
    (the interpreter sets TRITON_INTERPRET before its import); None for the built-in attention family."""
    study = STUDIES[wildcards.study]
    spec = study.get("family")
    return None if spec is None else {"spec": spec, "device": study["device"]}


def family_sources(wildcards):
    """The study's family's source files under the project (headroom.families.loading, found without
    importing it), as inputs so an edit reruns its trace and candidates; none for attention or an
    installed family (its source BLAKE3 is in their provenance)."""
    spec = STUDIES[wildcards.study].get("family")
    return [str(p) for p in hfloading.local_source_files(spec, ".")] if spec else []


def family_steps(wildcards):
    """A family study's trace is made from the engine's steps (steps.parquet); attention's is not."""
    return [f"{R}/{wildcards.study}/steps.parquet"] if STUDIES[wildcards.study].get("family") else []


def recorded(wildcards):
    return f"{STUDIES[wildcards.study]['replay']}/{wildcards.artifact}.parquet"


def measured_benchmarks(wildcards):
    """Stage wall times of the run that measured: in replay, the recorded run's, not this one's."""
    study = STUDIES[wildcards.study]
    return f"{study['replay']}/benchmarks" if study.get("replay") else f"{R}/{wildcards.study}/benchmarks"
