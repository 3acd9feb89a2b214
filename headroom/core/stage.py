"""What every pipeline script shares: logging to the rule's log, verified reads of named inputs,
provenance-stamped writes of named outputs, wall time, and one clear error on failure.

A script is a few lines::

    from headroom.core.stage import run_stage

    def main(stage):
        trace = stage.read("trace")                 # named input, BLAKE3-verified
        stage.write("correctness", check(trace, stage.params["correctness"]))

    run_stage(snakemake, main)

The output's name in the rule is the artifact's kind: the catalog makes one SQL view per kind.
"""

from __future__ import annotations

import logging
import os
import platform
import re
import sys
import time
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd

from headroom import __version__
from headroom.core import artifacts, contracts, identity, sources

VERSIONED_PACKAGES = ("torch", "triton", "numpy", "pandas", "pyarrow", "snakemake")


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "headroom": __version__}
    for name in VERSIONED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


def _plain(value: Any) -> Any:
    """Snakemake params (Namedlists, dicts of them) as plain JSON-able values."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _files(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Iterable):
        return [str(v) for v in value]
    return [str(value)]


class Stage:
    """One running rule: its params, its inputs (read verified), its outputs (written with provenance)."""

    def __init__(self, smk: Any, log: logging.Logger):
        self.smk = smk
        self.log = log
        self.rule = smk.rule
        self.params: dict[str, Any] = {k: _plain(v) for k, v in smk.params.items()}
        self.wildcards: dict[str, str] = dict(smk.wildcards.items())
        self.device: str = self.params.get("device", "none")
        self.study: str = self.wildcards.get("study", "")
        self._input_hashes: dict[str, str] | None = None
        self._environment: dict[str, Any] | None = None
        self.device_hooks: Any = None  # headroom.measure.device for rules that run kernels

    # -- inputs ---------------------------------------------------------------------------------
    def input_path(self, name: str) -> str:
        try:
            value = getattr(self.smk.input, name)
        except AttributeError:
            raise KeyError(f"rule {self.rule} has no input named {name!r}") from None
        return str(value)

    def input_paths(self, name: str) -> list[str]:
        return _files(getattr(self.smk.input, name))

    def read(self, name: str) -> pd.DataFrame:
        """The named input artifact as a DataFrame, after its BLAKE3 is verified."""
        return artifacts.read(self.input_path(name))

    def read_provenance(self, name: str) -> dict[str, Any]:
        """The named input artifact's provenance (its Parquet metadata), after its BLAKE3 is verified."""
        path = self.input_path(name)
        artifacts.verify(path)
        return artifacts.read_provenance(path)

    def read_all(self, name: str) -> pd.DataFrame:
        """Concatenation of a named input that lists several artifacts (e.g. all portfolio runs)."""
        frames = [artifacts.read(p) for p in self.input_paths(name)]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def input_hashes(self) -> dict[str, dict[str, str]]:
        """BLAKE3 of every input: artifacts (verified against their sidecar), source files, other files."""
        code = set(_files(self.smk.input.get("code", []))) if hasattr(self.smk.input, "get") else set()
        inputs, sources = {}, {}
        for path in _files(self.smk.input):
            if path in code:
                sources[path] = artifacts.hash_file(path)
            elif artifacts.sidecar(path).exists():
                inputs[path] = artifacts.verify(path)
            else:
                inputs[path] = artifacts.hash_file(path)
        return {"inputs": inputs, "code": sources}

    # -- outputs --------------------------------------------------------------------------------
    def output_path(self, name: str) -> str:
        try:
            return str(getattr(self.smk.output, name))
        except AttributeError:
            raise KeyError(f"rule {self.rule} has no output named {name!r}") from None

    def environment(self) -> dict[str, Any]:
        """A device rule's environment id and placement (from its `device` hooks, see
        headroom.measure.device), recorded in its artifacts' provenance; {} for other rules."""
        if self._environment is None:
            self._environment = self.device_hooks.provenance(self.device) if self.device_hooks else {}
        return self._environment

    def provenance(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        if self._input_hashes is None:
            self._input_hashes = self.input_hashes()
        prov = {
            "rule": self.rule,
            "wildcards": self.wildcards,
            "params": self.params,
            "inputs": self._input_hashes["inputs"],
            "code": self._input_hashes["code"],
            # the project modules this process loaded by now: a test checks they are all declared
            "modules": sources.loaded_modules(Path.cwd()),
            "device": self.device,
            **self.environment(),
            "versions": package_versions(),
        }
        if extra:
            prov["extra"] = _plain(extra)
        return prov

    def write(self, name: str, data: Any, *, extra_provenance: dict[str, Any] | None = None) -> str:
        """Write the named output artifact; its kind is `name`, which must have a contract in
        `headroom.core.contracts` (checked before writing). Returns its BLAKE3."""
        contracts.contract(name)
        path = self.output_path(name)
        digest = artifacts.write(data, path, kind=name, provenance=self.provenance(extra_provenance))
        self.log.info("wrote %s (%d rows, blake3 %s)", path, len(data), digest[:16])
        return digest


def _logger(rule: str, log_files: list[str]) -> logging.Logger:
    log = logging.getLogger(f"headroom.{rule}")
    log.setLevel(logging.INFO)
    log.handlers.clear()
    fmt = logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s")
    for path in log_files:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fh = logging.FileHandler(path, mode="w")
        fh.setFormatter(fmt)
        log.addHandler(fh)
    sh = logging.StreamHandler(sys.stderr)
    sh.setFormatter(fmt)
    log.addHandler(sh)
    log.propagate = False
    return log


def configure_device(device: str, resources: Any = None) -> None:
    """Must run before `kernels` (or anything that applies @triton.jit) is imported. With config
    local_gpus, the job holds the resource of its study's GPU (gpu_<index>=1): only that GPU is
    made visible to it."""
    if device == "interpret":
        os.environ["TRITON_INTERPRET"] = "1"
    held = [
        k
        for k, v in dict(resources.items() if resources else {}).items()
        if re.fullmatch(r"gpu_\d+", k) and v
    ]
    if device == "cuda" and held:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(k.split("_", 1)[1] for k in held)


def _artifact_inputs(stage: Stage) -> list[str]:
    """The job's inputs that are artifacts: Parquet files with a recorded BLAKE3."""
    return [p for p in _files(stage.smk.input) if p.endswith(".parquet") and artifacts.sidecar(p).exists()]


def verify_inputs(stage: Stage) -> None:
    """Every input artifact's bytes are the ones its sidecar's BLAKE3 records, checked before any of
    them is parsed: a changed file fails naming both hashes, not in the parser of whichever of its
    bytes changed (a flipped byte in the footer's schema)."""
    for path in _artifact_inputs(stage):
        artifacts.verify(path)


def check_environments(stage: Stage) -> None:
    """All device artifacts a job of one study reads come from one environment (GPU model, driver,
    versions); name the artifacts that do not. A rule over every study (the catalog) reads studies
    measured on different machines (an interpreter study beside a replayed H200 reference): each
    study's own rules have checked it."""
    if not stage.study:
        return
    by_env: dict[str, list[str]] = {}
    for path in _artifact_inputs(stage):
        env = artifacts.read_provenance(path).get("environment")
        if env:
            by_env.setdefault(env, []).append(path)
    if len(by_env) > 1:
        parts = [f"{env}: {', '.join(sorted(paths))}" for env, paths in sorted(by_env.items())]
        raise RuntimeError(
            f"study {stage.study!r}: its measurements come from {len(by_env)} environments (GPU model, "
            f"driver or versions differ): {'; '.join(parts)}. Rerun the odd ones on the study's GPU kind"
        )


def check_inputs(stage: Stage) -> None:
    """Every artifact a job reads is what its name and study folder say (headroom/core/identity.py):
    its kind, its study, and the inputs it was made from are the files beside it."""
    found = []
    for path in _artifact_inputs(stage):
        found += identity.problems(path, Path.cwd())
    if found:
        raise identity.IdentityError(f"study {stage.study!r}: " + "; ".join(found))


def clean_outputs(stage: Stage) -> None:
    """Remove what a killed earlier job left beside this job's outputs (temporary files)."""
    for path in _files(stage.smk.output):
        for tmp in artifacts.clean_temp_files(path):
            stage.log.info("removed %s, left by an interrupted write", tmp)


def run_stage(smk: Any, main: Callable[[Stage], Any], *, device: Any = None) -> None:
    """Run a rule's `main(stage)` with logging and device set up; a failure exits non-zero with
    the error in the rule's log (and on stderr) so Snakemake names the failing rule. `device`: the
    module headroom.measure.device, for rules that run kernels (GPU check, environment provenance)."""
    log = _logger(smk.rule, _files(smk.log) if smk.log else [])
    stage = Stage(smk, log)
    stage.device_hooks = device
    configure_device(stage.device, getattr(smk, "resources", None))
    start = time.perf_counter()
    log.info(
        "rule %s on device %s, pid %d, %.2f s after its process started (interpreter start and imports)",
        stage.rule, stage.device, os.getpid(), process_age_s(),
    )  # fmt: skip
    profiler = _profiler()
    try:
        if device is not None:
            device.check(stage.study, stage.device)
        verify_inputs(stage)
        check_environments(stage)
        check_inputs(stage)
        clean_outputs(stage)
        main(stage)
    except Exception as exc:
        log.exception("rule %s failed: %s", stage.rule, exc)
        raise SystemExit(f"rule {stage.rule} failed: {exc}") from exc
    finally:
        _dump_profile(profiler, stage)
    log.info("rule %s finished in %.2f s wall", stage.rule, time.perf_counter() - start)
    if device is not None and stage.device == "cuda":
        end_process()


def end_process() -> None:
    """End a CUDA stage's process at once, its outputs written and closed and its log flushed,
    without the interpreter's teardown (freeing every tensor, CUDA graph, cuDNN plan and loaded
    Triton module one at a time, stopping Inductor's compile workers); the driver releases the GPU
    when the process ends either way. In the H200 references' Snakemake logs (one-second
    timestamps), 2.0-4.3 s lay between the last line and Snakemake's 'Finished' of each job of the
    default study that ran many kernels (correctness, lifecycle, the six runs: 22-30 s in all),
    0.5-3.4 s on azure-conv and under 1.5 s for every MoE and RMSNorm job. Ending here, a job's
    benchmark exceeded its process's age at the stage's start plus the stage's wall by 0.3-0.5 s,
    where the default reference's heavy jobs exceeded them by 2.6-3.5 s
    (data/checks/h200/2026-12-05-session25). Only a job that succeeded ends here: a failure raises
    SystemExit as before."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)


#: An environment variable naming a folder: each stage then runs under cProfile and writes its
#: statistics there (<rule>-<pid>.prof; read them with `python -m pstats`), to find where a stage's
#: time goes. Profiling slows Python code: never set it for a study whose timings are kept.
PROFILE_ENV = "HEADROOM_PROFILE"


def _profiler():
    if not os.environ.get(PROFILE_ENV):
        return None
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    return profiler


def _dump_profile(profiler: Any, stage: Stage) -> None:
    if profiler is None:
        return
    profiler.disable()
    folder = Path(os.environ[PROFILE_ENV])
    folder.mkdir(parents=True, exist_ok=True)
    profiler.dump_stats(folder / f"{stage.rule}-{os.getpid()}.prof")


def process_age_s() -> float:
    """Seconds since this process started (Linux /proc; NaN elsewhere): what interpreter start and
    the script's imports took before the stage began."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")
