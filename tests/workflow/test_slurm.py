"""The study matrix on a real Slurm: a single-node cluster from Debian's packages (slurm-wlm, munge;
.ci/run installs them), no accounting database, two fake `gpu` generic resources. A tiny CPU smoke
study and a replay study run through snakemake-executor-plugin-slurm with profiles/slurm, end to
end; `headroom verify` passes and Slurm's own records show the jobs ran as Slurm jobs, the tiny
study's GPU jobs with its overlay's node constraint."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.pipeline import SNAKEMAKE, copy_project, env, headroom

pytestmark = pytest.mark.slow

DAEMONS = ("munged", "slurmctld", "slurmd")
FEATURE = "headroomgpu"  # the node's feature; the tiny study's overlay asks for it (slurm.constraint)
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")
FAKE_GPU_FILES = ("/dev/null", "/dev/zero")  # the node's "GPUs": character devices every host has
FAKE_GPUS = len(FAKE_GPU_FILES)


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "starting slurmctld/slurmd needs root"
    missing = [d for d in (*DAEMONS, "sbatch", "squeue") if shutil.which(d) is None]
    if missing:
        return f"Slurm is not installed ({', '.join(missing)} missing): apt-get install slurm-wlm munge"
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        return "snakemake-executor-plugin-slurm is not installed (pip install -e '.[test]')"
    return None


def _slurm_conf(folder: Path) -> Path:
    host = socket.gethostname()
    mem_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    conf = folder / "slurm.conf"
    conf.write_text(
        f"""ClusterName=headroom-test
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
SlurmctldPort=16817
SlurmdPort=16818
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MinJobAge=3600
ReturnToService=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
GresTypes=gpu
NodeName={host} CPUs={os.cpu_count()} RealMemory={mem_mb - 512} Gres=gpu:{FAKE_GPUS} Feature={FEATURE} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
    )
    # the GPU rules ask for gpu=1; the node declares fake GPUs (one device file each) so sbatch
    # accepts them, two so that two GPU jobs run at once (--jobs 2), as on a node with two GPUs
    (folder / "gres.conf").write_text("".join(f"Name=gpu File={dev}\n" for dev in FAKE_GPU_FILES))
    for sub in ("state", "spool"):
        (folder / sub).mkdir()
    return conf


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _cancel_jobs(wait_s: float = 30) -> None:
    """Cancel what is still queued or running on the test's cluster (a run that failed or timed
    out leaves jobs whose steps would outlive the daemons), and wait for them to end."""
    queued = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout.split()
    if not queued:
        return
    subprocess.run(["scancel", *queued], capture_output=True)
    deadline = time.time() + wait_s
    while time.time() < deadline:
        if not subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout.split():
            return
        time.sleep(1)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    if SYSTEM_CONF.exists() or SYSTEM_CONF.is_symlink():
        pytest.skip(f"this machine has a Slurm configuration of its own ({SYSTEM_CONF}); not touching it")
    folder = tmp_path_factory.mktemp("slurm")
    conf = _slurm_conf(folder)
    os.environ["SLURM_CONF"] = str(conf)  # the daemons and every Slurm command read this cluster
    # srun inside a batch job reads the default path, not SLURM_CONF: link it for the test's lifetime
    SYSTEM_CONF.parent.mkdir(parents=True, exist_ok=True)
    SYSTEM_CONF.symlink_to(conf)
    started: list[int] = []
    munge_pid = Path("/run/munge/munged.pid")
    if subprocess.run(["munge", "-n"], capture_output=True).returncode != 0:  # no munged running yet
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        subprocess.run(["munged", "--force"], check=True)
        started.append(_pid(munge_pid))
    subprocess.run(["slurmctld"], check=True)
    subprocess.run(["slurmd"], check=True)
    try:
        deadline = time.time() + 60
        state = ""
        while time.time() < deadline:
            for name in ("slurmctld", "slurmd"):
                pid = _pid(folder / f"{name}.pid")
                if pid and pid not in started:
                    started.append(pid)
            state = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True).stdout.strip()
            if state in ("idle", "mixed"):
                break
            time.sleep(1)
        else:
            log = (
                (folder / "slurmctld.log").read_text()[-2000:] if (folder / "slurmctld.log").exists() else ""
            )
            pytest.skip(f"the single-node Slurm did not come up (node state {state!r}):\n{log}")
        yield folder
    finally:
        _cancel_jobs()
        for name in ("slurmctld", "slurmd"):
            pid = _pid(folder / f"{name}.pid")
            if pid and pid not in started:
                started.append(pid)
        for pid in reversed(started):  # only what this fixture started, by pid
            if pid:
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        os.environ.pop("SLURM_CONF", None)
        SYSTEM_CONF.unlink(missing_ok=True)


def _test_profile(project: Path) -> Path:
    """profiles/slurm as shipped, less the conda deployment (CI has no conda and no network)."""
    cfg = yaml.safe_load((project / "profiles/slurm/config.yaml").read_text())
    cfg.pop("software-deployment-method")
    cfg["slurm-init-seconds-before-status-checks"] = 2
    cfg["seconds-between-status-checks"] = 3
    cfg["slurm-keep-successful-logs"] = True  # the test reads them
    out = project / "profiles/slurm-test"
    out.mkdir()
    (out / "config.yaml").write_text(yaml.safe_dump(cfg))
    return out


def test_smoke_and_replay_studies_run_as_slurm_jobs(slurm, tmp_path):
    project = copy_project(tmp_path / "headroom")
    profile = _test_profile(project)
    tiny = project / "config/studies/tiny.yaml"
    tiny.write_text(tiny.read_text() + f"\nslurm:\n  constraint: {FEATURE}\n")
    studies = ["tiny", "replay-h200-mooncake-conv-flashinfer-3x30"]
    start = time.time()
    proc = subprocess.run(
        [*SNAKEMAKE, "--profile", str(profile), "--jobs", "2", "--max-threads", "1"]
        + ["--config", f"studies=[{','.join(studies)}]"],
        cwd=project,
        env={**env(), "SLURM_CONF": os.environ["SLURM_CONF"]},
        capture_output=True,
        text=True,
        timeout=900,
    )
    wall_s = time.time() - start
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]
    out = proc.stdout + proc.stderr
    for study in studies:
        assert (project / f"results/{study}/report/index.html").exists(), study
    assert (project / "results/catalog.duckdb").exists()
    verify = headroom(project, "verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr

    # Slurm's own record: every non-local job was an sbatch job, and they ran
    submitted = out.count("has been submitted with SLURM jobid")
    assert submitted >= 10, out[-4000:]
    jobs = subprocess.run(
        ["squeue", "-h", "--states=all", "-o", "%i %T %j %f"], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    completed = [line for line in jobs if " COMPLETED " in line]
    assert len(completed) >= submitted, jobs
    # the overlay's constraint reached sbatch (-C) through the plugin's `constraint` resource
    assert any(line.endswith(f" {FEATURE}") for line in completed), jobs
    logs = list((project / ".snakemake/slurm_logs").rglob("*.log"))
    assert any("rule_portfolio" in str(p) for p in logs) and any("rule_policies" in str(p) for p in logs), (
        logs
    )
    print(f"Slurm end to end: {submitted} Slurm jobs, {wall_s:.0f} s wall")
