"""A family reference keeps the source files it was measured from (headroom.core.replay.SOURCES):
tools/import_reference.py copies them in, the replay check holds them to the BLAKE3 the artifacts
recorded, a replay imports them beside its artifacts, and lineage then resolves there, so a replayed
reference verifies after its family's module has moved on (tests/workflow/test_family_study.py)."""

from __future__ import annotations

import shutil

import pytest

from headroom.core import artifacts, replay
from tests.pipeline import ROOT
from tools import import_reference

RMSNORM = ROOT / "data/reference/h200/rmsnorm-6x160"
SOURCE = "examples/rmsnorm/family.py"


def test_a_replayed_studys_source_input_resolves_to_its_kept_copy(tmp_path):
    study = tmp_path / "results" / "replay-x"
    artifact = study / "portfolio" / "run-1.parquet"
    assert replay.lineage_input(artifact, SOURCE, tmp_path) == tmp_path / SOURCE  # nothing kept
    (study / replay.SOURCES / SOURCE).parent.mkdir(parents=True)
    (study / replay.SOURCES / SOURCE).write_text("# as measured\n")
    assert replay.lineage_input(artifact, SOURCE, tmp_path) == (study / replay.SOURCES / SOURCE).resolve()
    log = "data/traces/log.csv"  # data, not a source: the project's, kept or not
    assert replay.lineage_input(artifact, log, tmp_path) == tmp_path / log
    elsewhere = tmp_path / "results" / "live" / "trace.parquet"  # another study keeps none
    assert replay.lineage_input(elsewhere, SOURCE, tmp_path) == tmp_path / SOURCE


def test_kept_sources_are_the_recorded_ones_and_a_replay_imports_them(tmp_path):
    folder = shutil.copytree(RMSNORM, tmp_path / "rmsnorm")
    shutil.rmtree(folder / replay.SOURCES)
    assert import_reference.keep_sources(folder) == [SOURCE]
    assert artifacts.verify(folder / replay.SOURCES / SOURCE) == artifacts.hash_file(ROOT / SOURCE)
    names = replay.check_recorded(folder)
    study = tmp_path / "results" / "replay-rmsnorm"
    replay.import_artifact(folder / "trace.parquet", study / "trace.parquet", "trace.parquet")
    assert (study / replay.SOURCES / SOURCE).read_bytes() == (ROOT / SOURCE).read_bytes()
    assert "trace.parquet" in names


def test_a_kept_source_that_is_not_the_recorded_one_is_refused(tmp_path):
    folder = shutil.copytree(RMSNORM, tmp_path / "rmsnorm")
    kept = folder / replay.SOURCES / SOURCE
    kept.write_text(kept.read_text() + "# edited after the measurement\n")
    with pytest.raises(artifacts.ArtifactError):  # its sidecar no longer holds
        artifacts.verify(kept)
    with pytest.raises(replay.ReplayError, match="rmsnorm"):
        replay.check_recorded(folder)
    artifacts.record_hash(kept)  # re-hashed: the file is whole, but not what the artifacts recorded
    with pytest.raises(
        replay.ReplayError, match=f"made from {SOURCE} with blake3 .*, the folder's kept copy has"
    ):
        replay.check_recorded(folder)


def test_keeping_sources_from_a_tree_that_changed_them_is_refused_naming_the_file(tmp_path):
    root = tmp_path / "checkout"
    (root / SOURCE).parent.mkdir(parents=True)
    (root / SOURCE).write_text("# another version\n")
    folder = shutil.copytree(RMSNORM, tmp_path / "rmsnorm")
    with pytest.raises(SystemExit, match=f"{SOURCE} here has BLAKE3 .*the commit that measured it"):
        import_reference.keep_sources(folder, root)


def test_importing_a_study_whose_source_this_checkout_changed_writes_nothing(tmp_path):
    import tarfile

    tarball = tmp_path / "study.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(RMSNORM, arcname="results/rmsnorm")
    root = tmp_path / "checkout"
    (root / SOURCE).parent.mkdir(parents=True)
    (root / SOURCE).write_text("# another version\n")
    dest = tmp_path / "dest"
    with pytest.raises(SystemExit, match=f"{SOURCE} here has BLAKE3"):
        import_reference.import_study(tarball, "again", dest, None, None, root)
    assert not (dest / "again").exists()
    out = import_reference.import_study(tarball, "again", dest, None, None)  # this checkout holds it
    assert (out / replay.SOURCES / SOURCE).read_bytes() == (ROOT / SOURCE).read_bytes()
    assert replay.check_recorded(out)


def test_an_attention_studys_steps_are_not_kept_a_familys_are(tmp_path):
    """Steps are kept where the trace was made from them (a family study), not beside an attention
    trace made from the request log (nothing measured names them)."""
    import tarfile

    from tests.pipeline import ROOT as root

    mooncake = root / "data/reference/h200/mooncake-conv-flashinfer-3x30"
    for folder, kept in ((RMSNORM, True), (mooncake, False)):
        tarball = tmp_path / f"{folder.name}.tar.gz"
        with tarfile.open(tarball, "w:gz") as tar:
            tar.add(folder, arcname=f"results/{folder.name}")
            if not (folder / "steps.parquet").exists():  # an attention study's results hold steps
                tar.add(RMSNORM / "steps.parquet", arcname=f"results/{folder.name}/steps.parquet")
                tar.add(
                    RMSNORM / "steps.parquet.blake3", arcname=f"results/{folder.name}/steps.parquet.blake3"
                )
        out = import_reference.import_study(tarball, f"again-{folder.name}", tmp_path / "dest", None, None)
        assert (out / "steps.parquet").exists() is kept
        assert ("steps.parquet" in replay.manifest(out)) is kept
        assert replay.check_recorded(out)
