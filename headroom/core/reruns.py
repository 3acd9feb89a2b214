"""What a plain `snakemake` run will do about a results folder, for the hints of `headroom verify`:
which jobs it reruns, and whether a stale lock stops it first.

Which jobs: read from Snakemake's own records of the jobs it ran in this project
(`.snakemake/metadata/`, one JSON record per output file: the rule and its declared inputs). A plain
run rewrites a missing output by rerunning its job, and reruns every job with an input among what
a rerun job writes, transitively: Snakemake plans the whole run before any job starts, so a job
downstream of one that reruns reruns too, whatever bytes come out (README, "How reruns behave").
Without those records (a results folder copied elsewhere, another Snakemake record format), the hint
says how to ask Snakemake instead (a dry run).

The lock: Snakemake locks the project while it runs (`.snakemake/locks/`) and removes the lock at
exit; a run killed (kill -9, a lost node) leaves it, and the next run stops on it until
`snakemake --unlock`.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterable
from pathlib import Path

#: How the README runs the pipeline (the hint's command).
RUN = "snakemake --cores 1 --resources gpu=1"
SNAKEMAKE_DIR = ".snakemake"


def _decoded(record: Path, metadata: Path) -> str | None:
    """The output path a metadata record is about: its name (split into folders of '@'-prefixed
    parts when long) is the urlsafe base64 of the path."""
    parts = record.relative_to(metadata).parts
    text = "".join(p.removeprefix("@") for p in parts)
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        return None


def recorded_jobs(root: Path) -> dict[str, tuple[str, tuple, frozenset[str], float]] | None:
    """{output path (relative to the project root): (rule, job key, its job's declared inputs, when
    the job started)} from Snakemake's records of this project; None without records or in a format
    not known here. The outputs of one job share its key (its rule, Snakemake's job hash and inputs)."""
    metadata = root / SNAKEMAKE_DIR / "metadata"
    if not metadata.is_dir():
        return None
    out = {}
    for record in metadata.rglob("*"):
        if record.is_dir():
            continue
        path = _decoded(record, metadata)
        try:
            data = json.loads(record.read_text())
            rule, inputs = data["rule"], data["input"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if path is None or not isinstance(rule, str) or not isinstance(inputs, list):
            return None
        declared = frozenset(os.path.normpath(str(i)) for i in inputs)
        started = data.get("starttime")
        started = float(started) if isinstance(started, int | float) else 0.0
        out[os.path.normpath(path)] = (rule, (rule, data.get("job_hash"), declared), declared, started)
    return out or None


def rerun_rules(root: Path, written: Iterable[str] = (), changed: Iterable[str] = ()) -> list[str] | None:
    """The rules of the jobs a plain run reruns, in the order Snakemake ran them, each with its job
    count when more than one ("portfolio x3"): the jobs that write `written` (files, relative to the
    project root, to be deleted or already gone) and every recorded output missing on disk, as
    Snakemake's plan does; then every job one of whose declared inputs a rerun job writes or is in
    `changed` (files whose bytes changed). None: no records to tell (`recorded_jobs`)."""
    jobs = recorded_jobs(root)
    if jobs is None:
        return None
    written = {os.path.normpath(w) for w in written} | {p for p in jobs if not os.path.lexists(root / p)}
    outputs: dict[tuple, set[str]] = {}
    started: dict[tuple, float] = {}
    for path, (_, key, _, start) in jobs.items():
        outputs.setdefault(key, set()).add(path)
        started[key] = min(start, started.get(key, start))
    rerun = {jobs[w][1] for w in written if w in jobs}
    dirty = written | {os.path.normpath(c) for c in changed} | {p for key in rerun for p in outputs[key]}
    while True:
        more = {key for _, key, inputs, _ in jobs.values() if key not in rerun and inputs & dirty}
        if not more:
            break
        rerun |= more
        dirty |= {p for key in more for p in outputs[key]}
    counts: dict[str, int] = {}
    for key in sorted(rerun, key=lambda k: (started[k], k[0])):  # the order they ran in
        counts[key[0]] = counts.get(key[0], 0) + 1
    return [rule if n == 1 else f"{rule} x{n}" for rule, n in counts.items()]


def rerun_hint(root: Path, written: Iterable[str] = (), changed: Iterable[str] = ()) -> str:
    """What a plain run does (see rerun_rules), as a hint's words."""
    rules = rerun_rules(root, written, changed)
    if rules is None:
        return f"rerun the pipeline ({RUN}; `snakemake --dry-run` lists the jobs it will rerun)"
    if not rules:
        return f"rerun the pipeline ({RUN})"
    return (
        f"rerun the pipeline ({RUN}), which reruns {', '.join(rules)} (Snakemake's records of their inputs)"
    )


def _snakemake_running(root: Path) -> bool | None:
    """Whether a snakemake process runs in `root` (its working directory); None where processes
    cannot be looked at (no /proc)."""
    proc = Path("/proc")
    if not (proc / "self").exists():
        return None
    here = root.resolve()
    for pid in proc.iterdir():
        if not pid.name.isdigit() or pid.name == str(os.getpid()):
            continue
        try:
            cmdline = (pid / "cmdline").read_bytes()
            if b"snakemake" not in cmdline:
                continue
            if Path(os.readlink(pid / "cwd")).resolve() == here:
                return True
        except OSError:  # gone, or another user's
            continue
    return False


def stale_lock(root: Path) -> str | None:
    """A lock Snakemake left in `root` while no snakemake runs there (a run killed): what to do about
    it, in one line; None when there is none (or one that a running snakemake holds)."""
    locks = root / SNAKEMAKE_DIR / "locks"
    try:
        held = sorted(p.name for p in locks.iterdir())
    except OSError:
        return None
    if not held:
        return None
    running = _snakemake_running(root)
    if running:
        return None
    unsure = " (if no snakemake runs here)" if running is None else ""
    return (
        f"{locks} holds {len(held)} lock(s) of a snakemake run that did not end{unsure} (killed?); a plain "
        f'run stops on it ("Directory cannot be locked"): run `snakemake --unlock` in {root}, then '
        f"rerun the pipeline, which reruns the jobs the killed run left unfinished"
    )
