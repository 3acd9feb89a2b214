"""Every artifact knows what it is and where it belongs: readers check its kind, its study and the
inputs it was made from against the files beside it, not only its bytes (issue 23, items 1-4)."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from headroom.core import artifacts, catalog, cli, identity, layout, replay, stage
from tests.artifact_helpers import write_filled

REFERENCE = Path(__file__).resolve().parents[2] / "data" / "reference" / "h200"
# another run's environment and calibration: the retired generation-1 default's (tests/fixtures/h200-gen1)
GEN1 = Path(__file__).resolve().parents[1] / "fixtures" / "h200-gen1"


def _write(path: Path, df: pd.DataFrame, kind: str, study: str, inputs: dict[str, str] | None = None) -> str:
    """An artifact of `kind` written by study `study`'s rule (its contract's columns filled in)."""
    return write_filled(path, df, kind, inputs, wildcards={"study": study}, code={})


def make_study(project: Path, name: str, verdict: str, median_us: float) -> dict[str, Path]:
    """results/<name>/: trace -> portfolio run 1 -> decision, a calibration and a graph sweep."""
    folder = project / "results" / name
    rel = lambda p: p.relative_to(project).as_posix()  # noqa: E731
    out = {k: folder / f"{k}.parquet" for k in ("trace", "decision", "calibration", "graph_sweep")}
    out["portfolio"] = folder / "portfolio" / "run-1.parquet"
    h = _write(out["trace"], pd.DataFrame({"invocation": [0, 1], "phase": ["prefill", name]}), "trace", name)
    runs = pd.DataFrame({"run": [1, 1], "invocation": [0, 1], "candidate": ["t0", "t1"]})
    h2 = _write(out["portfolio"], runs.assign(median_us=median_us), "portfolio", name, {rel(out["trace"]): h})
    decision = pd.DataFrame({"verdict": [verdict], "reason": [f"study {name}"]})
    _write(out["decision"], decision, "decision", name, {rel(out["portfolio"]): h2})
    _write(out["calibration"], pd.DataFrame({"metric": ["hbm"]}), "calibration", name)
    _write(out["graph_sweep"], pd.DataFrame({"phase": ["decode"]}), "graph_sweep", name)
    return out


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "proj"
    make_study(root, "a", "stop", 3.0)
    make_study(root, "b", "continue", 5.0)
    return root


def copy_artifact(src: Path, dest: Path) -> None:
    """Copy an artifact with its sidecar, as a person would."""
    for ext in ("", artifacts.SIDECAR_SUFFIX):
        shutil.copyfile(f"{src}{ext}", f"{dest}{ext}")


def gate(capsys, project: Path, study: str) -> tuple[int, str]:
    code = cli.main(["--results", str(project / "results"), "gate", "--study", study])
    out = capsys.readouterr()
    return code, out.out + out.err


# -- item 1: another study's real decision --------------------------------------------------------
def test_gate_refuses_other_studys_decision(project, capsys):
    assert gate(capsys, project, "a")[0] == 0  # a's own decision: stop
    copy_artifact(project / "results/b/decision.parquet", project / "results/a/decision.parquet")
    code, out = gate(capsys, project, "a")
    assert code == 1 and "continue" not in out.split("headroom:")[0]
    assert "study 'b' inside study 'a'" in out  # both identities named
    assert "results/a/portfolio/run-1.parquet" in out  # the input it was not made from


def test_catalog_build_refuses_other_studys_decision(project):
    copy_artifact(project / "results/b/decision.parquet", project / "results/a/decision.parquet")
    paths = layout.discover(project / "results/a")
    with pytest.raises(identity.IdentityError, match="study 'b' inside study 'a'"):
        catalog.build(paths, project / "results" / layout.CATALOG_NAME, project_root=project)
    assert not (project / "results" / layout.CATALOG_NAME).exists()


class Named(list):
    """Snakemake's Namedlist: a list of paths, each also an attribute by its name."""

    def __init__(self, **named: str):
        super().__init__(named.values())
        self.__dict__.update(named)

    def get(self, name: str, default=None):
        return self.__dict__.get(name, default)

    def items(self):
        return self.__dict__.items()


def fake_job(study: str, inputs: dict[str, str], outputs: dict[str, str] | None = None):
    """What Snakemake hands a rule's script (the attributes headroom.core.stage reads)."""
    return SimpleNamespace(
        rule="report",
        input=Named(**inputs),
        output=Named(**(outputs or {})),
        params={},
        wildcards={"study": study},
        log=[],
        resources={},
    )


def test_stage_refuses_other_studys_decision_as_input(project, monkeypatch):
    """The report (any stage) reading another study's decision fails before it runs, naming both."""
    copy_artifact(project / "results/b/decision.parquet", project / "results/a/decision.parquet")
    monkeypatch.chdir(project)
    job = fake_job("a", {"decision": "results/a/decision.parquet"})
    ran = []
    with pytest.raises(SystemExit, match="study 'b' inside study 'a'"):
        stage.run_stage(job, lambda s: ran.append(s))
    assert not ran


# -- items 2, 3: the wrong kind under a name -------------------------------------------------------
def test_gate_refuses_a_trace_copied_over_the_decision(project, capsys):
    copy_artifact(project / "results/a/trace.parquet", project / "results/a/decision.parquet")
    code, out = gate(capsys, project, "a")
    assert code == 1
    assert "holds a 'trace' artifact" in out and "not the 'decision'" in out
    assert "no-decision" not in out


def test_catalog_refuses_swapped_calibration_and_graph_sweep(project):
    folder = project / "results/a"
    tmp = folder / "swap.parquet"
    copy_artifact(folder / "calibration.parquet", tmp)
    copy_artifact(folder / "graph_sweep.parquet", folder / "calibration.parquet")
    copy_artifact(tmp, folder / "graph_sweep.parquet")
    for ext in ("", artifacts.SIDECAR_SUFFIX):
        Path(f"{tmp}{ext}").unlink()
    with pytest.raises(identity.IdentityError) as err:
        catalog.build(
            layout.discover(folder), project / "results" / layout.CATALOG_NAME, project_root=project
        )
    assert "calibration.parquet: holds a 'graph_sweep' artifact" in str(err.value)
    assert "graph_sweep.parquet: holds a 'calibration' artifact" in str(err.value)


def test_verify_names_an_artifact_of_the_wrong_kind(project, capsys):
    copy_artifact(project / "results/a/trace.parquet", project / "results/a/decision.parquet")
    code = cli.main(["--results", str(project / "results"), "verify"])
    out = capsys.readouterr().out
    assert code == 1 and "holds a 'trace' artifact" in out


# -- item 4: a calibration or environment of another run in a replay folder ------------------------
def _recorded_copy(tmp_path: Path, study: str) -> Path:
    folder = tmp_path / study
    shutil.copytree(REFERENCE / study, folder)
    return folder


def test_replay_refuses_a_generation1_calibration_in_a_generation2_folder(tmp_path):
    folder = _recorded_copy(tmp_path, "mooncake-conv-flashinfer-3x30")
    assert replay.check_recorded(folder)  # the folder as recorded replays
    copy_artifact(GEN1 / "calibration.parquet", folder / "calibration.parquet")
    with pytest.raises(replay.ReplayError, match="mixes artifacts of different runs") as err:
        replay.check_recorded(folder, study="replay-x")
    assert "calibration.parquet" in str(err.value) and "different code" in str(err.value)


def test_replay_refuses_an_environment_of_another_run(tmp_path):
    """A calibration records the environment it was measured in (rules/measure.smk): a replay folder
    whose environment is another run's is refused naming both hashes."""
    folder = _recorded_copy(tmp_path, "mooncake-conv-flashinfer-3x30")
    (folder / "README.md").unlink()  # a results folder replayed as it is: no import manifest
    env = artifacts.verify(folder / "environment.parquet")
    prov = artifacts.read_provenance(folder / "calibration.parquet")
    prov["inputs"] = {"results/mooncake-conv/environment.parquet": env}
    table = artifacts.read_table(folder / "calibration.parquet")
    artifacts.write(table, folder / "calibration.parquet", kind="calibration", provenance=prov)
    assert replay.check_recorded(folder)
    copy_artifact(GEN1 / "environment.parquet", folder / "environment.parquet")
    with pytest.raises(replay.ReplayError) as err:
        replay.check_recorded(folder)
    other = artifacts.recorded_hash(folder / "environment.parquet")
    assert "calibration.parquet was made from a environment.parquet" in str(err.value)
    assert env[:16] in str(err.value) and other[:16] in str(err.value)


def test_replay_refuses_a_generation1_environment_in_a_generation2_reference(tmp_path):
    """The committed references predate the environment edge; their README's table, written at
    import from the verified artifacts, names the environment that belongs there."""
    folder = _recorded_copy(tmp_path, "mooncake-conv-flashinfer-3x30")
    copy_artifact(GEN1 / "environment.parquet", folder / "environment.parquet")
    with pytest.raises(replay.ReplayError) as err:
        replay.check_recorded(folder)
    gen1 = artifacts.recorded_hash(GEN1 / "environment.parquet")
    gen2 = artifacts.recorded_hash(REFERENCE / "mooncake-conv-flashinfer-3x30/environment.parquet")
    assert f"environment.parquet has BLAKE3 {gen1[:16]}" in str(err.value)
    assert f"mooncake-conv-flashinfer-3x30's README.md recorded {gen2[:16]}" in str(err.value)


def test_import_reference_writes_the_manifest_the_replay_check_reads(tmp_path):
    import tarfile

    from tools import import_reference

    src = _recorded_copy(tmp_path, "mooncake-conv-flashinfer-3x30")
    tarball = tmp_path / "study.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(src, arcname="results/mooncake-conv")
    out = import_reference.import_study(tarball, "again", tmp_path / "dest", None, None)
    names = replay.check_recorded(out)
    assert replay.manifest(out) == {n: artifacts.recorded_hash(out / n) for n in names}


def test_replay_refuses_an_artifact_of_the_wrong_kind(tmp_path):
    folder = _recorded_copy(tmp_path, "mooncake-conv-flashinfer-3x30")
    copy_artifact(folder / "graph_sweep.parquet", folder / "calibration.parquet")
    with pytest.raises(replay.ReplayError, match="calibration.parquet holds a 'graph_sweep' artifact"):
        replay.check_recorded(folder)


def test_calibrate_reads_the_environment(tmp_path):
    """The rule gives the calibration its environment edge (what the replay check relies on)."""
    text = (Path(__file__).resolve().parents[2] / "rules" / "measure.smk").read_text()
    calibrate = text.split("rule calibrate:")[1].split("\nrule ")[0]
    assert 'environment=f"{S}/environment.parquet"' in calibrate.split("output:")[0]


def _hand_recorded(folder: Path, study: str, environment: str) -> Path:
    """A recorded folder written by study `study` in environment `environment` (one portfolio run)."""
    names = [f"{n}.parquet" for n in replay.MEASURED] + [
        "portfolio/run-1.parquet",
        "portfolio/run-1-samples.parquet",
    ]
    for name in names:
        kind = artifacts.kind_of_name(folder / name)
        env = {"environment": environment} if kind != "candidates" else {}  # candidates: no device
        wildcards = {"study": study, **({"run": "1"} if "portfolio" in name else {})}
        write_filled(folder / name, pd.DataFrame(), kind, None, wildcards=wildcards, code={}, **env)
    return folder


def test_replay_refuses_a_calibration_of_another_study_naming_both_studies(tmp_path):
    """A generation-1 calibration (recorded by study g1, without the environment edge) copied into a
    generation-2 results folder: its recorded study is not the folder's."""
    g1 = _hand_recorded(tmp_path / "results/g1", "g1", "e0")
    g2 = _hand_recorded(tmp_path / "results/g2", "g2", "e0")
    assert replay.check_recorded(g2)
    copy_artifact(g1 / "calibration.parquet", g2 / "calibration.parquet")
    with pytest.raises(replay.ReplayError, match="mixes artifacts of different runs") as err:
        replay.check_recorded(g2, study="replay-g2")
    assert "calibration.parquet was recorded for study 'g1'" in str(err.value)
    assert "study 'g2'" in str(err.value)


def test_replay_refuses_an_environment_of_another_machine_naming_both_environments(tmp_path):
    g1 = _hand_recorded(tmp_path / "a/results/same", "same", "e1")
    g2 = _hand_recorded(tmp_path / "b/results/same", "same", "e2")
    copy_artifact(g1 / "environment.parquet", g2 / "environment.parquet")
    with pytest.raises(replay.ReplayError) as err:
        replay.check_recorded(g2)
    assert "environment.parquet was recorded in environment 'e1'" in str(err.value)
    assert "environment 'e2'" in str(err.value)


def test_readers_refuse_a_measured_artifact_of_another_run_in_a_replayed_folder(tmp_path, monkeypatch):
    """After a replay, a generation-1 calibration (or one measured elsewhere) copied into the study
    folder: the stage reading it and the catalog build refuse it, naming both identities."""
    project = tmp_path / "proj"
    folder = _hand_recorded(project / "results/replay-g2", "g2", "e0")
    other = _hand_recorded(tmp_path / "old/results/g1", "g1", "e9")
    assert all(identity.problems(p, project) == [] for p in layout.discover(folder))
    copy_artifact(other / "calibration.parquet", folder / "calibration.parquet")
    found = " ".join(identity.problems(folder / "calibration.parquet", project))
    assert (
        "calibration.parquet: recorded for study 'g1', but its folder's environment.parquet for study 'g2'"
        in found
    )
    assert "in environment 'e9'" in found and "in environment 'e0'" in found
    monkeypatch.chdir(project)
    job = fake_job("replay-g2", {"calibration": "results/replay-g2/calibration.parquet"})
    with pytest.raises(SystemExit, match="for study 'g1'"):
        stage.run_stage(job, lambda s: None)
    with pytest.raises(identity.IdentityError, match="for study 'g1'"):
        catalog.build(
            layout.discover(folder), project / "results" / layout.CATALOG_NAME, project_root=project
        )


# -- a portfolio run copied over another run: the same kind, another identity ----------------------
def test_readers_and_replay_refuse_a_portfolio_run_copied_over_another(tmp_path):
    project = tmp_path / "proj"
    folder = project / "results/s"
    for run in (1, 2):
        write_filled(
            folder / f"portfolio/run-{run}.parquet",
            pd.DataFrame({"run": [run]}),
            "portfolio",
            None,
            wildcards={"study": "s", "run": str(run)},
        )
    assert identity.problems(folder / "portfolio/run-2.parquet", project) == []
    copy_artifact(folder / "portfolio/run-1.parquet", folder / "portfolio/run-2.parquet")
    found = identity.problems(folder / "portfolio/run-2.parquet", project)
    assert found and "run-2.parquet: holds portfolio run 1, not the run 2 its name says" in found[0]
    recorded = _hand_recorded(tmp_path / "rec/results/g", "g", "e0")
    write_filled(
        recorded / "portfolio/run-2.parquet",
        pd.DataFrame(),
        "portfolio",
        None,
        wildcards={"study": "g", "run": "2"},
    )
    write_filled(
        recorded / "portfolio/run-2-samples.parquet",
        pd.DataFrame(),
        "portfolio_samples",
        None,
        wildcards={"study": "g", "run": "2"},
    )
    copy_artifact(recorded / "portfolio/run-1-samples.parquet", recorded / "portfolio/run-2-samples.parquet")
    with pytest.raises(replay.ReplayError, match="run-2-samples.parquet holds portfolio run 1"):
        replay.check_recorded(recorded)


def test_a_study_folder_linked_to_another_studys_is_not_that_study(project):
    """results/c -> results/b: the decision read through c is b's; a folder is where it lies."""
    (project / "results/c").symlink_to(project / "results/b")
    found = identity.problems(project / "results/c/decision.parquet", project)
    assert any("study 'b' inside study 'c'" in line for line in found), found
    assert identity.problems(project / "results/b/decision.parquet", project) == []
    linked = project.parent / "elsewhere"  # a results folder on a data disk, linked in: still fine
    (project / "results").rename(linked)
    (project / "results").symlink_to(linked)
    assert identity.problems(project / "results/a/decision.parquet", project) == []
    assert identity.problems(linked / "a/decision.parquet", project) == []


# -- item 4 after a replay: an artifact of another run copied over an imported one ----------------
def _imported(recorded: Path, study_dir: Path) -> None:
    """What the replay rule leaves: every recorded artifact copied byte for byte."""
    for name in replay.recorded_names(recorded):
        (study_dir / name).parent.mkdir(parents=True, exist_ok=True)
        copy_artifact(recorded / name, study_dir / name)


def test_a_replayed_folder_holding_another_runs_calibration_is_refused_naming_both_hashes(tmp_path):
    recorded = _hand_recorded(tmp_path / "rec", "g2", "e0")
    other = _hand_recorded(tmp_path / "old", "g1", "e0")
    study_dir = tmp_path / "results/replay-rec"
    replay.check_imported(recorded, study_dir)  # nothing imported yet: the replay imports it all
    _imported(recorded, study_dir)
    replay.check_imported(recorded, study_dir, study="replay-rec")
    copy_artifact(other / "calibration.parquet", study_dir / "calibration.parquet")
    with pytest.raises(replay.ReplayError, match="holds artifacts of another run") as err:
        replay.check_imported(recorded, study_dir, study="replay-rec")
    mine, theirs = (artifacts.recorded_hash(f / "calibration.parquet") for f in (study_dir, recorded))
    assert f"{study_dir / 'calibration.parquet'} has BLAKE3 {mine[:16]}" in str(err.value)
    assert f"the recorded {recorded / 'calibration.parquet'} {theirs[:16]}" in str(err.value)


def test_the_plan_refuses_a_generation1_calibration_in_a_generation2_replay(tmp_path):
    """The gen-1 reference calibration copied into a replayed gen-2 study: its provenance names no
    study or environment (recorded before either), so the plan compares it with the recorded one."""
    from tests.pipeline import copy_project, snakemake

    project = copy_project(tmp_path / "p")
    study_dir = project / "results/replay-h200-mooncake-conv-flashinfer-3x30"
    _imported(REFERENCE / "mooncake-conv-flashinfer-3x30", study_dir)
    copy_artifact(GEN1 / "calibration.parquet", study_dir / "calibration.parquet")
    before = (study_dir / "calibration.parquet").read_bytes()
    proc = snakemake(
        project,
        "-n",
        "--config",
        "studies=[replay-h200-mooncake-conv-flashinfer-3x30]",
        check=False,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "holds artifacts of another run" in out, out[-2000:]
    assert "replay-h200-mooncake-conv-flashinfer-3x30/calibration.parquet has BLAKE3" in out
    assert (study_dir / "calibration.parquet").read_bytes() == before
