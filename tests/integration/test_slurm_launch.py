"""The Slurm launcher `rlsim launch slurm` writes, run for real: a slurmctld and a slurmd (with
munge) started here from a generated config, one Slurm node at 127.77.250.1 whose two "GPUs" are
gres devices standing in for /dev/nvidia*; the sbatch script starts Ray on the job's node, waits
for it, runs the doctor and a scenario with --backend real, keeps the report and stops its own
Ray (and nothing else on the host). One Slurm node: this machine runs one slurmd."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from rlsim.plugin.session import require

pytestmark = pytest.mark.integration
NODE_ADDR = "127.77.250.1"  # a loopback address no rlsim cluster slot uses (slots are 0-11)
CTLD_ADDR = "127.77.250.9"
SLURM_CONF = """ClusterName=rlsimtest
SlurmctldHost={host}({ctld})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={d}/munge.sock
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
MpiDefault=none
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
NodeName=rn1 NodeAddr={node} NodeHostname={host} CPUs={cpus} RealMemory=2000 Gres=gpu:2
PartitionName=rlsim Nodes=rn1 Default=YES MaxTime=INFINITE State=UP
"""
SCENARIO = """name: slurm_smoke
description: the reference trainer on the Ray cluster the Slurm launcher started
cluster: {nodes: 1, gpus_per_node: 2}
trainer:
  config: grpo_tiny
  overrides: {total_steps: 4, save_freq: 2, placement: {nnodes: 1, gpus_per_node: 2}}
expect:
  - completes: {}
  - final_step: {step: 4}
"""


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "Slurm's daemons run as root here: run as root"
    lacking = [b for b in ("munged", "slurmctld", "slurmd", "sbatch") if not shutil.which(b)]
    return f"{', '.join(lacking)} not installed (ci/setup.sh installs Debian's slurm-wlm)" \
        if lacking else None


@pytest.fixture
def slurm(tmp_path):
    require(_missing())
    d = tmp_path
    for sub in ("state", "spool"):
        (d / sub).mkdir()
    (d / "munge.key").write_bytes(os.urandom(1024))
    (d / "munge.key").chmod(0o600)
    for i in range(2):  # gres device files: character devices, as /dev/nvidia* are
        os.mknod(d / f"fake-nvidia{i}", 0o600 | 0o020000, os.makedev(1, 3))
    (d / "gres.conf").write_text(f"AutoDetect=off\nNodeName=rn1 Name=gpu "
                                 f"File={d}/fake-nvidia[0-1]\n")
    conf = d / "slurm.conf"
    conf.write_text(SLURM_CONF.format(host=os.uname().nodename, ctld=CTLD_ADDR, d=d,
                                      node=NODE_ADDR, cpus=os.cpu_count()))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    subprocess.run(["munged", "-f", "-S", f"{d}/munge.sock", f"--key-file={d}/munge.key",
                    f"--log-file={d}/munged.log", f"--pid-file={d}/munged.pid",
                    f"--seed-file={d}/munged.seed"], check=True)
    daemons = [subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
               for cmd in (["slurmctld", "-D", "-f", str(conf)],
                           ["slurmd", "-D", "-f", str(conf), "-N", "rn1"])]
    try:
        deadline = time.monotonic() + 30
        while subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True,
                             text=True).stdout.strip() != "idle":
            assert time.monotonic() < deadline, (d / "slurmctld.log").read_text()[-2000:]
            time.sleep(0.3)
        yield env
    finally:
        subprocess.run(["scancel", "--full", "--partition=rlsim"], env=env, capture_output=True)
        for p in daemons:
            p.terminate()
        for p in daemons:
            p.wait(10)
        subprocess.run(["munged", "-s", "-S", f"{d}/munge.sock"], capture_output=True)


def wait_job(job: str, env: dict, timeout: float) -> dict:
    """The job's fields once Slurm says it ended (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        out = subprocess.run(["scontrol", "show", "job", job, "-o"], env=env,
                             capture_output=True, text=True).stdout
        fields = dict(f.split("=", 1) for f in out.split() if "=" in f)
        if fields.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT",
                                      "NODE_FAIL", "OUT_OF_MEMORY"):
            return fields
        assert time.monotonic() < deadline, f"job {job} still {fields.get('JobState')}"
        time.sleep(0.5)


def test_the_generated_sbatch_script_runs_a_scenario_on_the_ray_it_starts(slurm, tmp_path):
    (tmp_path / "sc.yaml").write_text(SCENARIO)
    out, reports = tmp_path / "launch", tmp_path / "reports"
    subprocess.run(["rlsim", "launch", "slurm", "--nodes", "1", "--gpus-per-node", "2",
                    "--out", str(out), "--scenarios", str(tmp_path / "sc.yaml"), "--report-dir",
                    str(reports), "--wait", "120", "--time", "00:10:00"], check=True,
                   env={**slurm, "PATH": f"{Path(sys.executable).parent}:{slurm['PATH']}"})
    job = subprocess.run(["sbatch", "--parsable", "rlsim-acceptance.sbatch"], cwd=out,
                         env=slurm, capture_output=True, text=True, check=True).stdout.strip()
    try:
        fields = wait_job(job, slurm, 240)
        log = (out / f"rlsim-acceptance-{job}.out").read_text()
        assert fields["ExitCode"] == "0:0", log[-3000:]
        assert f"rlsim launch: head rn1 at {NODE_ADDR}:6379" in log
        assert f"1/1 nodes alive with at least 2 GPUs (alive: {NODE_ADDR} (2 GPUs))" in log
        assert "PASS slurm_smoke" in log and "rlsim launch: doctor exited 0" in log
        assert "rlsim launch: stopped" in log and "Ray process(es) of /tmp/ray-rlsim-" in log
        assert (reports / job / "summary.json").is_file()
        signoff = (reports / job / "signoff.html").read_text()  # the node as its probe saw it
        assert f"<td>{NODE_ADDR}</td>" in signoff and "no nvidia-smi" in signoff
        assert "<td>slurm_smoke</td><td>PASS</td>" in signoff
        assert 'name="slurm_smoke"' in (reports / job / "junit.xml").read_text()
        assert (reports / job / ".ray-auth-token").stat().st_mode & 0o077 == 0
        left = [p.pid for p in psutil.process_iter(["cmdline"])
                if any(f"/tmp/ray-rlsim-{job}" in a for a in p.info["cmdline"] or [])]
        assert left == [], "the job's Ray processes outlived it"
    finally:
        shutil.rmtree(f"/tmp/ray-rlsim-{job}", ignore_errors=True)
