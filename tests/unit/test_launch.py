"""`rlsim launch` as pure logic: the bounded wait's judgement of ray.nodes(), which processes the
stop helper takes for the job's Ray, the written sbatch script, and bad input (exit 2)."""

from __future__ import annotations

import shlex
import subprocess

import pytest
from typer.testing import CliRunner

from rlsim import commands as cli
from rlsim.launch.stop import rays_of
from rlsim.launch.wait import ready


def node(addr: str, gpus: float, alive: bool = True) -> dict:
    return {"NodeManagerAddress": addr, "Alive": alive, "Resources": {"GPU": gpus}}


def test_the_wait_counts_alive_nodes_with_their_gpus():
    nodes = [node("10.0.0.1", 8), node("10.0.0.2", 4), node("10.0.0.3", 8, alive=False)]
    ok, line = ready(nodes, 2, 8)
    assert not ok and line.startswith("1/2 nodes alive with at least 8 GPUs")
    assert "10.0.0.2 (4 GPUs)" in line and "10.0.0.3" not in line
    assert ready(nodes, 2, 4)[0]


def test_the_stop_helper_takes_only_the_jobs_ray_processes():
    job = "/tmp/ray-rlsim-42"
    assert rays_of(["gcs_server", f"--log_dir={job}/session_1/logs"], job)
    assert rays_of(["raylet", f"--temp_dir={job}", "--node_ip_address=10.0.0.1"], job)
    assert not rays_of(["python", "-m", "rlsim.launch.stop", job], job)  # the helper itself
    assert not rays_of(["raylet", "--temp_dir=/tmp/ray-rlsim-421"], job)  # job 421's Ray
    assert not rays_of(["raylet", "--temp_dir=/tmp/ray"], job)  # another Ray on the host


def run(*args: str):
    result = CliRunner().invoke(cli.app, ["launch", *args])
    return result.exit_code, result.output


def test_the_script_is_valid_bash_and_names_what_it_runs(tmp_path):
    code, out = run("slurm", "--nodes", "4", "--gpus-per-node", "8", "--out", str(tmp_path),
                    "--scenarios", "/shared/rlsim/scenarios", "--report-dir", "/shared/reports",
                    "--image", "nvcr.io/me/rl:1", "--allow-disruptive")
    script = (tmp_path / "rlsim-acceptance.sbatch").read_text()
    assert code == 0, out
    assert subprocess.run(["bash", "-n", str(tmp_path / "rlsim-acceptance.sbatch")]).returncode == 0
    for line in ("#SBATCH --nodes=4", "#SBATCH --gres=gpu:8", "#SBATCH --ntasks-per-node=1",
                 "-m rlsim run /shared/rlsim/scenarios --backend real",
                 "REPORT_ROOT=/shared/reports",
                 "IN=(--container-image=nvcr.io/me/rl:1 "
                 "--container-mounts=/shared/reports:/shared/reports)",
                 "--nodes 4 --gpus-per-node 8", "--allow-disruptive",
                 "scontrol show node \"$1\""):
        assert line in script, line
    commands = [x for x in script.splitlines() if not x.lstrip().startswith("#")]
    assert not any("ray stop" in x or '"$RAY" stop' in x for x in commands)  # not host-wide


@pytest.mark.parametrize(("args", "words"), [
    (["slurm", "--nodes", "0", "--gpus-per-node", "8"], "--nodes 0"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--report-dir", "rel"],
     "--report-dir rel: 'rel' is not an absolute path"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--time", "1h"],
     "--time 1h: write it as Slurm does"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--time", "00:00:00"],
     "a job's time limit is 1 second to 365 days"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--time", "99:99:99"],
     "minutes after hours"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--wait", "0.4"], "--wait 0.4"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--scenarios", ","],
     "names no file or folder"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--accelerator", "A100"],
     "slurm asks for GPUs by count"),
    (["skypilot", "--nodes", "2", "--gpus-per-node", "8", "--scenarios", "/s", "--time", "2:00"],
     "a SkyPilot task has no time limit"),
    (["pbs", "--nodes", "2", "--gpus-per-node", "8"], "'pbs': rlsim launch writes slurm"),
])
def test_bad_input_exits_2_naming_the_option(tmp_path, args, words):
    code, out = run(*args, "--out", str(tmp_path / "x"))
    assert code == 2 and words in out and "Traceback" not in out, out


def launch_spec(**kw):
    from rlsim.launch.model import Launch

    return Launch(**{"nodes": 2, "gpus_per_node": 8, "python": "python3",
                     "scenarios": ["/opt/rlsim/scenarios"], "report_dir": "/reports",
                     "image": "rayproject/ray:2.60.0-gpu", **kw})


def test_the_rayjob_is_valid_against_kuberays_own_crd_and_runs_the_flow():
    from rlsim.launch import kuberay

    doc = kuberay.rayjob(launch_spec())
    assert kuberay.problems(doc) == []
    spec = doc["spec"]
    assert spec["shutdownAfterJobFinishes"] is True and spec["activeDeadlineSeconds"] == 3600
    worker = spec["rayClusterSpec"]["workerGroupSpecs"][0]
    assert worker["replicas"] == worker["minReplicas"] == worker["maxReplicas"] == 2
    assert worker["template"]["spec"]["containers"][0]["resources"]["limits"] == \
        {"nvidia.com/gpu": 8}
    for part in ("rlsim.launch.wait --address \"$RAY_ADDRESS\" --nodes 2 --gpus-per-node 8",
                 "-m rlsim doctor", "--backend real", "exit $status"):
        assert part in spec["entrypoint"]
    # the schema catches what KubeRay would reject
    worker["replicas"] = "two"
    spec["shutdownAfterJobFinishes"] = "yes"
    bad = kuberay.problems(doc)
    assert any("replicas" in b for b in bad) and any("shutdownAfterJobFinishes" in b
                                                    for b in bad)


def test_container_platforms_need_an_image_and_the_scenarios_as_the_image_sees_them(tmp_path):
    code, out = run("kuberay", "--nodes", "2", "--gpus-per-node", "8", "--out", str(tmp_path),
                    "--scenarios", "/opt/s")
    assert code == 2 and "--image" in out
    code, out = run("kuberay", "--nodes", "2", "--gpus-per-node", "8", "--out", str(tmp_path),
                    "--image", "x:1")
    assert code == 2 and "--scenarios" in out


@pytest.mark.parametrize(("platform", "broken"), [
    ("skypilot", {"num_nodes": "two"}),
    ("dstack", {"nodes": "two"}),
])
def test_skypilot_and_dstack_tasks_are_valid_against_their_own_models(tmp_path, platform, broken):
    from rlsim.launch import tasks

    doc = getattr(tasks, platform)(launch_spec(accelerator="A100"))
    assert tasks.problems(platform, doc) == []
    script = doc["run"] if platform == "skypilot" else doc["commands"][0]
    (tmp_path / "run.sh").write_text(script)
    assert subprocess.run(["bash", "-n", str(tmp_path / "run.sh")]).returncode == 0
    for part in ("--nodes 2 --gpus-per-node 8", "--backend real", "rlsim.launch.stop",
                 "--temp-dir \"$RAY_TMP\""):
        assert part in script, part
    assert "A100:8" in str(doc["resources"])
    assert tasks.problems(platform, {**doc, **broken})  # their schema catches it


HOSTILE = {"python": "/opt/my py'thon/bin/python", "report": '/shared/re"ports $HOME',
           "scenario": "/s/x y;rm -rf z.yaml"}


def _scripts(platform: str, path) -> list[str]:
    """The shell each platform runs: the sbatch file, the RayJob's `bash -c` argument, the
    task's run/commands."""
    import yaml

    text = path.read_text()
    if platform == "slurm":
        return [text]
    doc = yaml.safe_load(text)
    if platform == "kuberay":
        return [shlex.split(doc["spec"]["entrypoint"])[2]]
    return [doc["run"]] if platform == "skypilot" else doc["commands"]


@pytest.mark.parametrize("platform", ["slurm", "kuberay", "skypilot", "dstack"])
def test_quotes_spaces_and_dollars_in_the_users_values_reach_the_shell_as_written(tmp_path,
                                                                                   platform):
    code, out = run(platform, "--nodes", "2", "--gpus-per-node", "8", "--out", str(tmp_path),
                    "--python", HOSTILE["python"], "--report-dir", HOSTILE["report"],
                    "--scenarios", HOSTILE["scenario"], "--image", "img:1")
    assert code == 0, out
    [written] = [p for p in tmp_path.iterdir() if p.is_file()]
    for script in _scripts(platform, written):
        assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
        # the line that runs the scenarios, echoed instead of run: the words the shell hands
        # over are the user's values, unsplit and unexpanded
        [line] = [ln.strip() for ln in script.replace("; ", "\n").splitlines()
                  if "-m rlsim run" in ln]
        line = line.removeprefix('on "$HEAD" ').removesuffix("; status=$?")
        argv = subprocess.run(["bash", "-c", "printf '%s\\n' " + line], text=True,
                              capture_output=True, env={"PATH": "/usr/bin:/bin"}).stdout
        assert argv.splitlines()[:5] == [HOSTILE["python"], "-m", "rlsim", "run",
                                         HOSTILE["scenario"]], argv
        assert shlex.quote(HOSTILE["report"]) in script  # quoted once, into a variable


@pytest.mark.parametrize(("given", "seconds", "written"), [
    ("90", 5400, "01:30:00"), ("90:30", 5430, "01:30:30"), ("01:00:00", 3600, "01:00:00"),
    ("2-12", 216000, "2-12:00:00"), ("1-00:30", 88200, "1-00:30:00"),
    ("1-02:03:04", 93784, "1-02:03:04"),
])
def test_every_slurm_time_form_is_read_and_written_one_way(given, seconds, written):
    spec = launch_spec(time=given)
    assert (spec.seconds, spec.time) == (seconds, written)


def test_the_substrate_raycluster_is_valid_against_kuberays_crd_and_hosts_simulated_nodes(
        tmp_path):
    import yaml

    from rlsim.launch import kuberay

    code, out = run("kuberay-substrate", "--nodes", "3", "--image", "me/rlsim:1", "--out",
                    str(tmp_path))
    assert code == 0, out
    path = tmp_path / "rlsim-substrate-raycluster.yaml"
    doc = yaml.safe_load(path.read_text())
    assert doc["kind"] == "RayCluster" and kuberay.problems(doc) == []
    assert "rlsim-substrate-head-svc:6379" in path.read_text()
    spec = doc["spec"]
    head, workers = spec["headGroupSpec"], spec["workerGroupSpecs"][0]
    # three pods, one per simulated node; CPU only; root and privileged (iptables, cgroups)
    assert workers["replicas"] == workers["minReplicas"] == workers["maxReplicas"] == 2
    pods = [head["template"]["spec"], workers["template"]["spec"]]
    for group in (head, workers):
        assert group["rayStartParams"] == {"num-gpus": "0"}
    for pod in pods:
        (container,) = pod["containers"]
        assert "resources" not in container and "gpu" not in yaml.safe_dump(pod)
        assert container["securityContext"] == {"privileged": True, "runAsUser": 0}
        assert container["volumeMounts"] == [{"name": "shared", "mountPath": "/rlsim"}]
        assert pod["volumes"][0]["persistentVolumeClaim"] == {"claimName": "rlsim-shared"}
    from importlib.metadata import version
    assert spec["rayVersion"] == version("ray")
    # what KubeRay rejects, and what Kubernetes would drop without a word, are both problems
    workers["replicas"] = "two"
    pods[0]["containers"][0]["securityContxt"] = pods[0]["containers"][0].pop("securityContext")
    bad = kuberay.problems(doc)
    assert any("replicas" in b for b in bad)
    assert "spec.headGroupSpec.template.spec.containers.0.securityContxt: not in the schema; " \
        "Kubernetes would drop it" in bad


@pytest.mark.parametrize(("args", "words"), [
    (["--nodes", "1", "--image", "x:1"], "--nodes 1: a substrate spreads"),
    (["--nodes", "3"], "--image"),
    (["--nodes", "3", "--image", "x:1", "--gpus-per-node", "8"], "--gpus-per-node"),
    (["--nodes", "3", "--image", "x:1", "--scenarios", "/s", "--time", "10"],
     "--scenarios, --time: a substrate's RayCluster runs nothing"),
    (["--nodes", "3", "--image", "x:1", "--shared-dir", "rel"], "--shared-dir rel"),
])
def test_the_substrate_refuses_what_it_has_no_place_for(tmp_path, args, words):
    code, out = run("kuberay-substrate", *args, "--out", str(tmp_path))
    assert code == 2 and words in out, out
    assert not list(tmp_path.iterdir())


def test_only_the_substrate_takes_a_shared_dir_and_the_others_need_gpus(tmp_path):
    code, out = run("kuberay", "--nodes", "2", "--image", "x:1", "--scenarios", "/s", "--out",
                    str(tmp_path))
    assert code == 2 and "--gpus-per-node" in out
    code, out = run("slurm", "--nodes", "2", "--gpus-per-node", "8", "--shared-dir", "/x",
                    "--out", str(tmp_path))
    assert code == 2 and "--shared-dir /x" in out


@pytest.mark.parametrize(("given", "mounted"), [
    ("/rlsim/", "/rlsim"), ("/mnt/shared/../rlsim", "/mnt/rlsim"),
    ("/var/lib/rlsim", "/var/lib/rlsim"), ("/tmp/rlsim", "/tmp/rlsim"), ("//data", "/data"),
])
def test_a_shared_folder_of_its_own_is_mounted_where_the_kernel_resolves_it(tmp_path, given,
                                                                            mounted):
    """What --shared-dir names is written as normalised: the manifest mounts the folder the
    system-folder check judged (``/mnt/shared/..`` is not a folder a pod has)."""
    import yaml

    code, out = run("kuberay-substrate", "--nodes", "2", "--image", "x:1", "--shared-dir", given,
                    "--out", str(tmp_path))
    assert code == 0, out
    doc = yaml.safe_load((tmp_path / "rlsim-substrate-raycluster.yaml").read_text())
    container = doc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert container["volumeMounts"] == [{"name": "shared", "mountPath": mounted}]
