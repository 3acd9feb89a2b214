"""`headroom verify --recompute`: re-run a study's CPU-derived stages and compare, cell by cell.

Sidecars are unkeyed: a derived artifact rewritten with forged numbers, forged provenance and a
fresh sidecar verifies. What cannot be forged this way is the computation, so this re-runs it: the
study's measured artifacts (environment, trace, candidates, correctness, portfolio runs, lifecycle,
graph sweep, calibration) are copied into a temporary folder, each derived stage (policies,
roofline, decision, recommendation, then the report) is run there through its own script (scripts/<rule>.py, as
Snakemake runs it) with the params its artifact recorded, and every table is compared with the
study's, naming the first differing cell, and dispatch.json key by key (a table rewritten with a
fresh sidecar and its BLAKE3 recorded again in recommendation.parquet verifies, and differs here). Floats compare equal within a relative 1e-9 (the
stages are deterministic; the slack absorbs another BLAS's summation order).

What it cannot cover, and why:
- the measurements themselves: they are not recomputed (no GPU is assumed, and a re-measurement
  differs by noise); their lineage and hashes are what `verify` checks;
- the params: each stage re-runs with the params its artifact recorded, so a forger who changes
  them together with the numbers (a threshold moved until the forged verdict follows) is not
  caught; what each artifact recorded is the catalog's `artifacts.params` column
  (`headroom query "SELECT path, params FROM artifacts"`), to be read against the study's config;
- the code: the stages run with the code checked out now, so a study made by other code differs
  where that code changed (rerun the pipeline first, which reruns what changed);
- the report's figures (compared by the report's data model, report.md, not the PNG bytes), its
  stage wall-times section (Snakemake's timings of the run, not derived) and its list of artifact
  hashes (the derived artifacts are compared as tables instead);
- a study folder without its measured artifacts (nothing to recompute from);
- columns holding another file's BLAKE3 (``*_blake3``), and dispatch.json's ``decision_blake3`` and
  ``provenance``: the bytes they hash carry provenance, which a recomputation changes; the lineage
  check covers them (and `verify` checks dispatch.json against the BLAKE3 recommendation.parquet
  recorded).
"""

from __future__ import annotations

import contextlib
import os
import runpy
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

from headroom.core import artifacts, layout
from headroom.core.identity import MEASURED_KINDS

#: The derived stages, in the order they run (each reads measured artifacts and those of the stages
#: before it).
STAGES = ("policies", "roofline", "decision", "recommendation")
#: Outputs a stage writes beside its Parquet artifacts (rules/analysis.smk): name -> file in the folder.
OTHER_OUTPUTS = {"recommendation": {"dispatch": "dispatch.json"}}
#: Input names that are not the kind they hold (rules/analysis.smk: the report's `samples`).
INPUT_NAMES = {"portfolio_samples": "samples"}
FLOAT_RTOL = 1e-9
#: report.md sections whose content is not derived from the artifacts (see the module doc).
NOT_DERIVED_SECTIONS = ("## Stage wall times", "## Artifacts read")


class Named(list):
    """What Snakemake hands a script as input/output: a list of paths, each also an attribute."""

    def __init__(self, named: dict[str, str | list[str]]):
        super().__init__(p for v in named.values() for p in ([v] if isinstance(v, str) else v))
        self.__dict__.update(named)

    def get(self, name: str, default=None):
        return self.__dict__.get(name, default)

    def items(self):
        return self.__dict__.items()


@contextlib.contextmanager
def _cwd(path: Path):
    old = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def _run_script(project: Path, work: Path, script: str, job: SimpleNamespace) -> str | None:
    """Run scripts/<rule>.py of `project` with cwd `work`, as Snakemake would; None or the error.
    What the stage logs goes to its log in `work`, not to the terminal."""
    (work / "logs").mkdir(exist_ok=True)
    with _cwd(work), open(work / "logs" / f"{job.rule}.stderr", "w") as err, contextlib.redirect_stderr(err):
        try:
            runpy.run_path(str(project / script), init_globals={"snakemake": job}, run_name="__main__")
        except SystemExit as exc:  # run_stage's one clear error
            return str(exc)
    return None


def _job(rule: str, inputs: dict, outputs: dict, params: dict, wildcards: dict, work: Path):
    log = work / "logs" / f"{rule}.log"
    return SimpleNamespace(
        rule=rule,
        input=Named(inputs),
        output=Named(outputs),
        params=params,
        wildcards=wildcards,
        log=[str(log)],
        resources={},
    )


def by_input_name(paths: list[Path], folder: Path) -> dict[str, str | list[str]]:
    """Artifacts of the study folder `folder` as a stage's named inputs, paths of the working copy
    (results/<study>/...): each named by the kind it holds (INPUT_NAMES where the rule says
    otherwise), a list for the artifacts of one per run (those in a folder of the study folder)."""
    named: dict[str, list[str]] = {}
    per_run: set[str] = set()
    for path in sorted(paths):
        rel = path.resolve().relative_to(folder.resolve())
        name = INPUT_NAMES.get(artifacts.kind_of_name(path), artifacts.kind_of_name(path))
        named.setdefault(name, []).append(f"results/{folder.name}/{rel.as_posix()}")
        if len(rel.parts) > 1:
            per_run.add(name)
    return {name: found if name in per_run else found[0] for name, found in named.items()}


def _inputs_of(path: Path, prov: dict, folder: Path, root: Path) -> dict[str, str | list[str]]:
    """A derived artifact's recorded inputs of its own study folder by name, and its code."""
    from headroom.core.replay import lineage_input

    found = [lineage_input(path, inp, root).resolve() for inp in sorted(prov.get("inputs", {}))]
    inside = [p for p in found if p.is_relative_to(folder.resolve())]
    return {**by_input_name(inside, folder), "code": sorted(prov.get("code", {}))}


def _script_of(prov: dict) -> str | None:
    scripts = [c for c in prov.get("code", {}) if c.startswith("scripts/") and c.endswith(".py")]
    return scripts[0] if len(scripts) == 1 else None


def _setup(work: Path, folder: Path, project: Path) -> Path:
    """The working copy: the study's measured artifacts (with sidecars), the code linked in."""
    dest = work / "results" / folder.name
    for path in layout.discover(folder):
        if artifacts.kind_of_name(path) in MEASURED_KINDS:
            for src in (path, artifacts.sidecar(path)):
                target = dest / src.relative_to(folder)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, target)
    for name in ("headroom", "kernels", "scripts", "config"):
        if (project / name).exists():
            (work / name).symlink_to(project / name)
    return dest


def _derived_jobs(folder: Path, project: Path) -> tuple[list[tuple[str, Path, dict]], list[str]]:
    """(rule, one of its artifacts, provenance) per derived stage in STAGES order, and the problems
    of derived artifacts that cannot be recomputed (unknown rule, no script recorded)."""
    jobs, problems, seen = [], [], set()
    for path in layout.discover(folder):
        if artifacts.kind_of_name(path) in MEASURED_KINDS:
            continue
        prov = artifacts.read_provenance(path)
        rule = prov.get("rule")
        if rule not in STAGES or _script_of(prov) is None:
            problems.append(f"{path}: made by rule {rule!r}, which --recompute cannot re-run")
        elif rule not in seen:
            seen.add(rule)
            jobs.append((rule, path, prov))
    return sorted(jobs, key=lambda j: STAGES.index(j[0])), problems


def _outputs_of(rule: str, folder: Path) -> dict[str, str]:
    """A derived stage's artifacts in the working copy: every artifact of `folder` its rule wrote."""
    out = {}
    for path in layout.discover(folder):
        if (
            artifacts.kind_of_name(path) not in MEASURED_KINDS
            and artifacts.read_provenance(path).get("rule") == rule
        ):
            rel = f"results/{folder.name}/{path.relative_to(folder).as_posix()}"
            out[artifacts.kind_of_name(path)] = rel
            out[f"{artifacts.kind_of_name(path)}_blake3"] = rel + artifacts.SIDECAR_SUFFIX
    for name, file in OTHER_OUTPUTS.get(rule, {}).items():
        out[name] = f"results/{folder.name}/{file}"
        out[f"{name}_blake3"] = out[name] + artifacts.SIDECAR_SUFFIX
    return out


def _cell(a, b) -> bool:
    if isinstance(a, float | np.floating) and isinstance(b, float | np.floating):
        return bool(np.isclose(a, b, rtol=FLOAT_RTOL, atol=0.0, equal_nan=True))
    if pd.api.types.is_scalar(a) and pd.api.types.is_scalar(b):
        return (pd.isna(a) and pd.isna(b)) or bool(a == b)
    return repr(a) == repr(b)


def first_difference(study: pd.DataFrame, recomputed: pd.DataFrame) -> str | None:
    """Where two tables first differ (columns, row count, then row by row, column by column)."""
    if list(study.columns) != list(recomputed.columns):
        return f"columns differ: the study's {list(study.columns)}, recomputed {list(recomputed.columns)}"
    if len(study) != len(recomputed):
        return f"{len(study)} rows in the study's, {len(recomputed)} recomputed"
    for i, (row, again) in enumerate(
        zip(study.itertuples(index=False), recomputed.itertuples(index=False), strict=True)
    ):
        for column, a, b in zip(study.columns, row, again, strict=True):
            if not _cell(a, b):
                return f"row {i}, column {column!r}: the study's {a!r}, recomputed {b!r}"
    return None


def _without_hashes(table: pd.DataFrame) -> pd.DataFrame:
    """The table without its ``*_blake3`` columns: hashes of other files' bytes (the recommendation's
    decision and dispatch table), which carry their provenance and so differ in a recomputation as
    the provenance does; their lineage is what `verify` checks."""
    return table.drop(columns=[c for c in table.columns if str(c).endswith("_blake3")])


#: Keys of a JSON output that are not derived from the measurements: its provenance (paths, code,
#: versions of the run that wrote it) and the BLAKE3 of another file (the decision's, whose bytes carry
#: provenance); what the lineage check covers instead.
JSON_NOT_DERIVED = ("provenance", "decision_blake3")


def json_difference(study, recomputed, where: str = "") -> str | None:
    """Where two JSON values first differ (keys in order, then values; floats within FLOAT_RTOL),
    as a dotted path, ``JSON_NOT_DERIVED`` keys left out at the top."""
    if isinstance(study, dict) and isinstance(recomputed, dict):
        skip = JSON_NOT_DERIVED if not where else ()
        keys = [k for k in study if k not in skip], [k for k in recomputed if k not in skip]
        if sorted(keys[0]) != sorted(keys[1]):
            return f"{where or 'top level'}: the study's keys {sorted(keys[0])}, recomputed {sorted(keys[1])}"
        for k in sorted(keys[0]):
            diff = json_difference(study[k], recomputed[k], f"{where}.{k}" if where else str(k))
            if diff:
                return diff
        return None
    if isinstance(study, list) and isinstance(recomputed, list):
        if len(study) != len(recomputed):
            return f"{where}: {len(study)} items in the study's, {len(recomputed)} recomputed"
        for i, (a, b) in enumerate(zip(study, recomputed, strict=True)):
            diff = json_difference(a, b, f"{where}[{i}]")
            if diff:
                return diff
        return None
    floats = all(isinstance(x, float) for x in (study, recomputed))
    same = _cell(study, recomputed) if floats else (type(study) is type(recomputed) and study == recomputed)
    return None if same else f"{where}: the study's {study!r:.80}, recomputed {recomputed!r:.80}"


def _compare_json(folder: Path, dest: Path) -> list[str]:
    """The JSON outputs (OTHER_OUTPUTS: dispatch.json) against their recomputation: a table rewritten
    with a fresh sidecar, and its BLAKE3 recorded again, is caught here."""
    import json

    out = []
    for file in sorted({f for outputs in OTHER_OUTPUTS.values() for f in outputs.values()}):
        path, again = folder / file, dest / file
        if not again.exists():
            continue  # its stage's failure is named above
        if not path.exists():
            out.append(f"{path}: missing, though its stage's recomputation writes one")
            continue
        try:
            study = json.loads(artifacts.read_regular(path))
        except (ValueError, RecursionError, artifacts.ArtifactError) as exc:
            out.append(f"{path}: cannot be compared with its recomputation: {str(exc)[:200]}")
            continue
        diff = json_difference(study, json.loads(artifacts.read_regular(again)))
        if diff:
            out.append(f"{path}: differs from its recomputation at {diff}")
    return out


def _compare(folder: Path, dest: Path) -> list[str]:
    out = _compare_json(folder, dest)
    for path in layout.discover(folder):
        if artifacts.kind_of_name(path) in MEASURED_KINDS:
            continue
        again = dest / path.relative_to(folder)
        if not again.exists():
            out.append(f"{path}: not recomputed (see the problems above)")
            continue
        diff = first_difference(*(_without_hashes(artifacts.read(p)) for p in (path, again)))
        if diff:
            out.append(f"{path}: differs from its recomputation: {diff}")
    return out


def recompute_study(folder: Path, results: Path) -> list[str]:
    """Problems found re-running `folder`'s derived stages and its report's data model."""
    project = results.resolve().parent
    jobs, problems = _derived_jobs(folder, project)
    with tempfile.TemporaryDirectory(prefix="headroom-recompute-") as tmp:
        work = Path(tmp)
        dest = _setup(work, folder, project)
        for rule, path, prov in jobs:
            job = _job(
                rule,
                _inputs_of(path, prov, folder, project),
                _outputs_of(rule, folder),
                prov.get("params", {}),
                prov.get("wildcards", {}),
                work,
            )
            error = _run_script(project, work, _script_of(prov), job)
            if error:
                problems.append(f"{folder}: recomputing rule {rule} failed: {error}")
        problems += _compare(folder, dest)
        if not problems and (folder / "report" / "report.md").exists():
            problems += _recompute_report(folder, dest, work, project)
    return problems


def _sections(md: str) -> dict[str, str]:
    """report.md by section heading ('' for what comes before the first), derived sections only."""
    out, heading = {"": []}, ""
    for line in md.splitlines():
        if line.startswith("## "):
            heading = line
            out[heading] = []
        out[heading].append(line)
    return {h: "\n".join(lines) for h, lines in out.items() if h not in NOT_DERIVED_SECTIONS}


def _recompute_report(folder: Path, dest: Path, work: Path, project: Path) -> list[str]:
    """The report regenerated from the recomputed artifacts, compared by report.md's sections."""
    md = (folder / "report" / "report.md").read_text(encoding="utf-8")
    title = next((line[2:] for line in md.splitlines() if line.startswith("# ")), "")
    out = f"results/{folder.name}/report"
    outputs = {"html": f"{out}/index.html", "md": f"{out}/report.md", "figures": f"{out}/figures"}
    outputs |= {"html_blake3": f"{out}/index.html.blake3", "md_blake3": f"{out}/report.md.blake3"}
    (work / "benchmarks").mkdir()
    params = {"report": {"title": title}, "benchmarks": str(work / "benchmarks")}
    # every artifact of the working copy: the report script takes those it knows (its INPUTS)
    inputs = {**by_input_name(layout.discover(dest), dest), "code": ["scripts/report.py"]}
    job = _job("report", inputs, outputs, params, {"study": folder.name}, work)
    error = _run_script(project, work, "scripts/report.py", job)
    if error:
        return [f"{folder}: recomputing the report failed: {error}"]
    study, again = _sections(md), _sections((work / outputs["md"]).read_text(encoding="utf-8"))
    for heading in list(study) + [h for h in again if h not in study]:
        a, b = study.get(heading, ""), again.get(heading, "")
        if a != b:
            line = next(
                (f"{x!r} vs {y!r}" for x, y in zip(a.splitlines(), b.splitlines(), strict=False) if x != y),
                "lengths",
            )
            return [
                f"{folder / 'report' / 'report.md'}: section {heading or 'headline'!r} differs from its recomputation: {line}"
            ]
    return []


def recompute_results(results: Path, folder: Path | None = None) -> list[str]:
    """recompute_study for one study folder, or for every study folder under `results`."""
    folders = [folder] if folder is not None else list(layout.studies(results).values())
    return [p for f in folders for p in recompute_study(f, results)]
