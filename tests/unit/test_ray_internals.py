"""rlsim.ray_internals: every use of Ray's private surface probed from the installed Ray's
files. The first test fails the day a Ray release renames what rlsim leans on; the others show
each probe failing on a Ray tree where that one thing changed, and each plain path taken."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from rlsim import ray_internals as ri
from rlsim.ray_internals import answers as kept_answers
from rlsim.ray_internals import installed, releases, stop, train
from rlsim.ray_internals import record as kept

INSTALLED = Version(ri.ray_version())


def test_every_capability_holds_on_the_installed_ray(monkeypatch):
    """On the Ray the suite runs on (the gate's, or a matrix release's), every capability is in
    force but token auth (and reading it again) below 2.52, where Ray has none: a rename in a
    new release fails here, naming the file and the symbol."""
    monkeypatch.delenv(ri.PLAIN_VAR, raising=False)
    expected_plain = ({"token_auth", "auth_reread"} if Version(ri.TOKEN_AUTH_SINCE) > INSTALLED
                      else set())
    if Version(ri.DASHBOARD_FORKSERVER_SINCE) > INSTALLED:  # its modules spawned: no server
        expected_plain.add("dashboard_forkserver")
    plain = {s.name: s.why for s in (ri.probe(c.name) for c in ri.CAPABILITIES)
             if not s.available}
    assert set(plain) == expected_plain, plain
    assert ri.version_problem() is None, "the suite runs on a Ray outside the proven range"


def _fake_ray(tmp_path: Path, *rels: str) -> Path:
    """A copy of the installed Ray's files ``rels`` (and its _raylet.so), to change one thing."""
    real = ri.surface().root
    root = tmp_path / "ray"
    for rel in rels:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(real / rel, root / rel)
    return root


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}: the test needs updating with Ray"
    path.write_text(text.replace(old, new))


@pytest.mark.parametrize(("capability", "rel", "old", "new", "why"), [
    ("worker_setup", "_private/parameter.py", "setup_worker_path", "worker_setup_script",
     "takes no setup_worker_path"),
    ("forked_agents", "_private/services.py", '"--runtime_env_agent_command={}"',
     '"--runtime_env_agent_cmd={}"', "no longer builds"),
    ("no_api_server", "_private/node.py", "def start_api_server(", "def start_dashboard_server(",
     "has no Node.start_api_server"),
    ("dashboard_beside", "_private/node.py", "webui=self._webui_url", "webui=self.webui_url",
     "has no webui=self._webui_url"),
    ("registration_poll", "_private/services.py", "def get_node(gcs_address, node_id)",
     "def get_node(gcs_address, node_id, timeout)", "get_node also needs timeout"),
    ("draining_nodes", "_private/state.py", "def get_draining_nodes(", "def draining_nodes(",
     "has no GlobalState.get_draining_nodes"),
    ("driver_address", "_private/worker.py", 'kwargs.pop("_node_ip_address"',
     'kwargs.pop("_node_ip"', "no longer builds"),
    ("forked_dashboard", "dashboard/utils.py", "ray.dashboard.modules.__path__",
     "ray.dashboard.head_modules.__path__", "no longer builds"),
    ("forked_dashboard", "_private/services.py", '"dashboard.py"', '"dashboard_main.py"',
     "no longer builds"),
])
def test_a_renamed_internal_fails_its_probe_and_names_it(tmp_path, capability, rel, old, new,
                                                         why):
    root = _fake_ray(tmp_path, "_private/parameter.py", "_private/services.py",
                     "_private/node.py", "_private/state.py", "_private/ray_constants.py",
                     "dashboard/consts.py", "dashboard/agent.py",
                     "_private/runtime_env/agent/main.py", "_private/workers/setup_worker.py",
                     "_private/worker.py", "dashboard/utils.py", "dashboard/dashboard.py")
    fake = ri.RaySurface(root, "9.9.9")
    assert ri.probe(capability, fake).available
    _edit(root / rel, old, new)
    fake = ri.RaySurface(root, "9.9.9")
    status = ri.probe(capability, fake)
    assert not status.available
    if why:
        assert why in status.why


@pytest.mark.skipif(Version(ri.DASHBOARD_FORKSERVER_SINCE) > INSTALLED,
                    reason="this Ray's dashboard spawns its modules")
@pytest.mark.parametrize(("old", "new", "why"), [
    ('multiprocessing.get_context("forkserver")', 'multiprocessing.get_context("spawn")',
     'no multiprocessing.get_context("forkserver")'),
    ('return "forkserver"', 'return "fork_server"', "no longer builds"),
])
def test_a_dashboard_that_no_longer_uses_a_forkserver_fails_its_probe(tmp_path, old, new, why):
    root = _fake_ray(tmp_path, "dashboard/subprocesses/handle.py")
    assert ri.probe("dashboard_forkserver", ri.RaySurface(root, "9.9.9")).available
    _edit(root / "dashboard/subprocesses/handle.py", old, new)
    st = ri.probe("dashboard_forkserver", ri.RaySurface(root, "9.9.9"))
    assert why in st.why


@pytest.mark.skipif(Version(ri.DASHBOARD_FORKSERVER_SINCE) > INSTALLED,
                    reason="this Ray's dashboard spawns its modules")
def test_a_python_whose_forkserver_is_laid_out_otherwise_fails_the_probe(tmp_path, monkeypatch):
    """Python's side of dashboard_forkserver: its server's main and state as 3.10 to 3.13 have
    them, or Python's own server (3.14 adds an authentication key to main)."""
    import multiprocessing.forkserver as fs

    from rlsim.ray_internals import forkserver

    root = _fake_ray(tmp_path, "dashboard/subprocesses/handle.py")
    assert forkserver.python_problem() is None
    monkeypatch.setattr(fs, "main", lambda listener_fd, alive_r, preload, main_path=None,
                        sys_path=None, *, authkey_r=None: None)
    st = ri.probe("dashboard_forkserver", ri.RaySurface(root, "9.9.9"))
    assert not st.available and "forkserver.main takes" in st.why and "authkey_r" in st.why
    monkeypatch.undo()
    monkeypatch.delattr(fs._forkserver, "_forkserver_alive_fd")
    assert "keeps no _forkserver_alive_fd" in forkserver.python_problem()
    assert forkserver.start_here() is None


def test_a_setting_ray_no_longer_reads_is_never_set(tmp_path):
    """Ray ignores a RAY_ setting it does not know without a word: the probe reads the names
    compiled into _raylet.so, and the setting is left out, its capability said plain."""
    root = tmp_path / "ray"
    root.mkdir()
    (root / "_raylet.so").write_bytes(b"\0RAY_health_check_period_ms\0RAY_enable_worker_prestart\0")
    fake = ri.RaySurface(root, "9.9.9")
    assert fake.flags_known("RAY_health_check_period_ms", "RAY_prestart_worker_first_driver",
                            "RAY_health") == ["RAY_prestart_worker_first_driver", "RAY_health"]
    st = ri.probe("fast_health_checks", fake)
    assert not st.available and "RAY_health_check_initial_delay_ms" in st.why


@pytest.mark.skipif(not ri.token_auth(), reason="this Ray has no token auth")
def test_a_process_that_imported_ray_first_still_presents_the_token(tmp_path):
    """A user's script imports Ray, then asks an rlsim cluster: Ray's config is read again with
    the token settings (without, every GCS call of that process was refused)."""
    code = ("import os, ray\n"
            "from ray._raylet import AuthenticationMode, get_authentication_mode\n"
            "assert get_authentication_mode() != AuthenticationMode.TOKEN\n"
            "from rlsim.ray_internals import gcs\n"
            "gcs._set_auth(os.environ['TOKEN'])\n"
            "print(get_authentication_mode() == AuthenticationMode.TOKEN)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    token = tmp_path / "token"
    token.write_text("0" * 64)
    out = subprocess.run([sys.executable, "-c", code], env={**env, "TOKEN": str(token)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stdout + out.stderr


@pytest.mark.skipif(not ri.token_auth(), reason="this Ray has no token auth")
def test_reading_the_token_again_is_probed_in_the_core_library(tmp_path):
    root = _fake_ray(tmp_path, "_private/authentication/authentication_utils.py")
    (root / "_raylet.so").write_bytes(b"\0ray._raylet.Config.initialize\0")
    assert ri.probe("auth_reread", ri.RaySurface(root, "9.9.9")).available
    (root / "_raylet.so").write_bytes(b"\0ray._raylet.Config.initialise\0")
    st = ri.probe("auth_reread", ri.RaySurface(root, "9.9.9"))
    assert not st.available and "ray._raylet.Config.initialize" in st.why


def test_a_proto_message_is_read_from_the_generated_module(tmp_path):
    """Messages are read from the descriptor a *_pb2.py registers (its escapes make plain text
    unreliable): a field that is gone fails the probe."""
    root = _fake_ray(tmp_path, "core/generated/node_manager_pb2.py")
    fake = ri.RaySurface(root, "9.9.9")
    assert ri.probe("warm_workers", fake).available
    assert "keep_alive_duration_secs" in fake.message("core/generated/node_manager_pb2.py",
                                                      "PrestartWorkersRequest")
    assert fake.message("core/generated/node_manager_pb2.py", "NoSuchRequest") is None
    (root / "core/generated/node_manager_pb2.py").write_text("# no descriptor\n")
    st = ri.probe("warm_workers", ri.RaySurface(root, "9.9.9"))
    assert not st.available and "PrestartWorkersRequest" in st.why


def test_plain_on_purpose_turns_every_acceleration_off_but_not_what_rlsim_needs(monkeypatch):
    monkeypatch.setenv(ri.PLAIN_VAR, "all")
    plain = {s.name: s for s in ri.statuses()
             if not s.available and s.name not in ("token_auth", "auth_reread")}
    assert set(plain) == {"quiet_nodes", "fast_local_connect", "no_idle_workers",
                          "preload_modules", "registration_poll", "no_api_server",
                          "dashboard_beside", "worker_setup", "forked_agents", "lean_agent",
                          "forked_dashboard", "dashboard_forkserver", "warm_workers"}
    assert all(s.why == f"{ri.PLAIN_VAR} turned it off" for s in plain.values())
    assert ri.available("fast_health_checks") and ri.available("train_callbacks")
    monkeypatch.setenv(ri.PLAIN_VAR, "fast_health_checks")
    assert ri.health_check_env(1, 2, 3, 4) == {}
    assert ri.available("token_auth") == (Version(ri.TOKEN_AUTH_SINCE) <= INSTALLED)
    monkeypatch.setenv(ri.PLAIN_VAR, "token_auth")
    assert ri.connect_env("/t") == {}


def test_health_checks_become_ray_settings_where_ray_reads_them(monkeypatch):
    monkeypatch.delenv(ri.PLAIN_VAR, raising=False)
    env = ri.health_check_env(1000, 200, 1000, 3)
    assert env["RAY_health_check_period_ms"] == "200"
    assert set(env) == set(ri.HEALTH_FLAGS)


@pytest.mark.skipif(os.geteuid() != 0, reason="the refusal is root's")
def test_root_without_token_auth_is_refused_unless_it_accepts_the_risk(monkeypatch):
    monkeypatch.setenv(ri.PLAIN_VAR, "token_auth")
    monkeypatch.delenv(ri.ALLOW_OPEN_VAR, raising=False)
    refused = ri.auth_refusal()
    assert refused and "unauthenticated" in refused and ri.ALLOW_OPEN_VAR in refused
    assert ri.connect_env("/t") == {}, "no token claimed where Ray cannot check one"
    monkeypatch.setenv(ri.ALLOW_OPEN_VAR, "1")
    assert ri.auth_refusal() is None
    monkeypatch.setenv(ri.PLAIN_VAR, "")
    monkeypatch.delenv(ri.ALLOW_OPEN_VAR)
    if Version(ri.TOKEN_AUTH_SINCE) <= INSTALLED:
        assert ri.auth_refusal() is None
        assert ri.connect_env("/t") == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": "/t"}


def test_a_rewrite_that_matched_less_than_it_saw_is_reported_plain(monkeypatch):
    monkeypatch.delenv(ri.PLAIN_VAR, raising=False)
    ok = ri.cluster_report({"raylets": 2, "lean": 2, "forked": 4}, lean=True, forked=True)
    assert {"lean_agent", "forked_agents"} <= set(ok["in_force"])
    short = ri.cluster_report({"raylets": 2, "lean": 2, "forked": 1}, lean=True, forked=True)
    assert "forked_agents" not in short["in_force"]
    # the dashboard's forkserver only where this Ray's dashboard has one (2.59 on)
    server = {"dashboard_forkserver"} if ri.available("dashboard_forkserver") else set()
    unused = ri.cluster_report(None, lean=False, forked=False)
    assert set(unused["unused"]) == {"lean_agent", "forked_agents", "forked_dashboard", *server}
    # a cluster with the dashboard: its command rewritten once, or Ray's plain path said
    seen = {"raylets": 2, "forked": 4}
    both = ri.cluster_report({**seen, "dashboard": 1, "forkserver": 1}, lean=False, forked=True)
    assert {"forked_dashboard", *server} <= set(both["in_force"])
    alone = ri.cluster_report({**seen, "dashboard": 1}, lean=False, forked=True)
    assert "forked_dashboard" in alone["in_force"]
    if server:
        assert "dashboard command" in alone["plain"]["dashboard_forkserver"]
    missed = ri.cluster_report(seen, lean=False, forked=True)
    assert "forked_dashboard" not in missed["in_force"]
    assert "dashboard command" in missed["plain"]["forked_dashboard"]
    assert "forked_dashboard" in ri.cluster_report(seen, lean=True, forked=True)["unused"]


def test_version_range():
    """rlsim is proven on every release of the minor releases PROVEN names, from the first to
    the last, patches and candidates included, and on nothing below or above."""
    first, last = releases.PROVEN
    major, minor = first.split(".")
    assert ri.version_problem(f"{first}.0") is None and ri.version_problem(f"{last}.1") is None
    assert "outside" in ri.version_problem(f"{major}.{int(minor) - 1}.1")
    assert "outside" in ri.version_problem(f"{releases.BELOW}.0")
    assert ri.version_problem(f"{last}.0rc1") is None


class _Report:
    checkpoint = "ckpt"


@pytest.mark.parametrize(("args", "kwargs"), [
    (([{"step": 1}], "ckpt"), {}),                    # Ray 2.48-2.49
    ((), {"metrics": [{"step": 1}], "checkpoint": "ckpt"}),
    ((_Report(), [{"step": 1}]), {}),                 # Ray 2.50 and later
    ((), {"training_report": _Report(), "metrics": [{"step": 1}]}),
])
def test_ray_train_reports_read_in_either_form(args, kwargs):
    assert train.report(args, kwargs) == ([{"step": 1}], "ckpt")


def test_ray_train_v2_default_read_from_ray(tmp_path, monkeypatch):
    root = tmp_path / "ray" / "train" / "v2" / "_internal"
    root.mkdir(parents=True)
    (root / "constants.py").write_text(
        "def is_v2_enabled() -> bool:\n    return env_bool(V2_ENABLED_ENV_VAR, False)\n")
    monkeypatch.setattr(installed, "surface", lambda: ri.RaySurface(tmp_path / "ray", "2.48.0"))
    assert train.v2_by_default() is False
    (root / "constants.py").write_text(
        "def is_v2_enabled() -> bool:\n    return env_bool(V2_ENABLED_ENV_VAR, True)\n")
    monkeypatch.setattr(installed, "surface", lambda: ri.RaySurface(tmp_path / "ray", "2.51.0"))
    assert train.v2_by_default() is True


@pytest.fixture
def kept_record(tmp_path, monkeypatch):
    """A fake Ray whose probe answers are kept in a home of this test's: the record's path, and
    a function that reads every answer as a new process would (the record first)."""
    root = _fake_ray(tmp_path, "_private/node.py")
    fake = ri.RaySurface(root, "9.9.9")
    monkeypatch.setenv("RLSIM_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir(mode=0o700)
    monkeypatch.setattr(installed, "surface", lambda: fake)
    monkeypatch.delenv(ri.PLAIN_VAR, raising=False)

    def answers() -> dict:
        kept_answers._installed_answers.cache_clear()
        kept_answers._installed.cache_clear()
        return {c.name: ri.status(c.name).why for c in ri.CAPABILITIES}

    answers()
    yield kept_answers._record_path(), answers
    kept_answers._installed_answers.cache_clear()
    kept_answers._installed.cache_clear()


def test_probe_answers_are_kept_in_the_home_until_a_file_they_read_changes(tmp_path,
                                                                             monkeypatch,
                                                                             kept_record):
    """Probing costs every rlsim process a quarter second: the answers are kept in the home and
    read back while the install, its version, the probes and each file they read are unchanged."""
    record_path, answers = kept_record
    first = answers()
    assert record_path.parent == tmp_path / "home"
    record = json.loads(record_path.read_text())
    assert "_private/node.py" in record["files"] and record["answers"]["node_start"]
    record["answers"]["node_start"] = "read from the record"
    # rewritten whole, its checksum with it (what rlsim itself writes): read back as kept
    record["checksum"] = kept.checksum(record["key"], record["files"], record["answers"])
    record_path.write_text(json.dumps(record))
    assert answers()["node_start"] == "read from the record" and ri.record_note() is None
    root = tmp_path / "ray"
    _edit(root / "_private/node.py", "def start_api_server(", "def start_api_server_(")
    fresh = ri.RaySurface(root, "9.9.9")  # as the next process sees the install
    monkeypatch.setattr(installed, "surface", lambda: fresh)
    again = answers()
    assert again["node_start"] == first["node_start"] != "read from the record"
    assert "start_api_server" in again["no_api_server"]


def _tamper(path: Path, how: str) -> None:
    record = json.loads(path.read_text())
    if how == "an answer edited":  # a capability made to look in force: its checksum says not
        record["answers"]["node_start"] = None
    elif how == "answers as a list":
        record["answers"] = sorted(record["answers"])
    elif how == "answers not strings":
        record["answers"] = {k: 1 for k in record["answers"]}
    elif how == "no checksum":
        del record["checksum"]
    elif how == "files odd":
        record["files"] = {"x": "yesterday"}
    path.unlink()
    if how == "a FIFO":
        os.mkfifo(path)
    elif how == "deep JSON":
        path.write_text("[" * 100_000)
    elif how == "not JSON":
        path.write_bytes(b"\xff{")
    elif how == "too large":
        path.write_text(" " * (kept.MAX_RECORD + 1))
    else:
        path.write_text(json.dumps(record))


@pytest.mark.parametrize("how,said", [
    ("an answer edited", "checksum does not match"), ("answers as a list", "answers are not"),
    ("answers not strings", "answers are not"), ("no checksum", "not a probe record"),
    ("files odd", "files are not"), ("a FIFO", "is a FIFO"), ("deep JSON", "nested too deep"),
    ("not JSON", "is not JSON"), ("too large", "larger than"),
])
def test_a_damaged_probe_record_is_probed_again_and_said(kept_record, how, said):
    """A tampered record's answers were shown as Ray's; answers stored as a list gave a
    TypeError; a FIFO hung `rlsim ray`. Each is now probed again, and `rlsim ray` says so."""
    import threading

    from typer.testing import CliRunner

    from rlsim import commands as cli

    path, answers = kept_record
    truth = answers()
    assert truth["node_start"] is not None  # the fake Ray lacks most of what node_start reads
    _tamper(path, how)
    got = []
    worker = threading.Thread(target=lambda: got.append(answers()), daemon=True)
    worker.start()
    worker.join(30)
    assert got == [truth]
    note = ri.record_note()
    assert note and said in note and "probed again" in note, note
    if how != "a FIFO":
        assert "the record rewritten" in note, note
        kept_answers._installed_answers.cache_clear()
        assert ri.record_note() is None  # rewritten whole: read back as kept
    else:
        assert "not rewritten" in note and "is a FIFO" in note, note
    kept_answers._installed_answers.cache_clear()
    kept_answers._installed.cache_clear()
    if how != "a FIFO":  # (a FIFO is never replaced: still there)
        _tamper(path, how)
    result = CliRunner().invoke(cli.app, ["ray", "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert said in json.loads(result.output)["probe_record"]


@pytest.mark.parametrize(("version", "refused"), [("2.48.0", True), ("2.53.0", True),
                                                  ("2.54.1", False), ("2.60.0", False)])
def test_detached_actors_are_refused_where_the_raylet_gives_their_port_away(monkeypatch,
                                                                            version, refused):
    """Seen on 2.48, 2.52 and 2.53 (the substrate's detach test): a later driver on the machine
    was handed a detached host's worker port and aborted; 2.54 on keep it."""
    monkeypatch.setattr(installed, "ray_version", lambda: version)
    why = ri.detached_actors_problem()
    assert (why is not None) == refused, why
    if refused:
        assert f"Ray {version}'s raylet gives a detached actor's worker port" in why


def test_rays_own_namespaces_are_still_rays():
    """The reach leaves out the work of jobs in Ray's own namespaces (the dashboard's, Ray Jobs'
    supervisors): a Ray that renames them would have rlsim count them as the trainer's."""
    from rlsim.ray_internals.gcs import RAY_OWN_NAMESPACES

    root = ri.surface().root
    head = (root / "dashboard/modules/job/job_head.py").read_text()
    common = (root / "dashboard/modules/job/common.py").read_text()
    internal, supervisor = RAY_OWN_NAMESPACES
    assert f'"{internal}' in head, f"Ray's job_head no longer names {internal!r}"
    assert f'SUPERVISOR_ACTOR_RAY_NAMESPACE = "{supervisor}"' in common


def test_rays_own_names_are_still_rays():
    """What the annex knows of a node without asking Ray (its head's resource, its processes'
    names, titles and flags, its session directory, the setting that keeps a process's GPUs)
    is read here from the installed Ray's own sources: a release that renames one fails here,
    naming it, before a fault signals nothing or the head is not found."""
    from rlsim.ray_internals import nodes, session, settings

    root = ri.surface().root

    def text(*rels: str) -> str:
        return "\n".join((root / rel).read_text() for rel in rels if (root / rel).is_file())

    prefix, _, head = nodes.HEAD_RESOURCE.partition(":")
    constants = text("_common/constants.py", "_private/resource_spec.py")
    assert f'NODE_ID_PREFIX = "{prefix}:"' in constants, "Ray's node resources have no node: prefix"
    assert f'NODE_ID_PREFIX + "{head}"' in constants, f"Ray's head resource is no longer {head}"
    # Ray's own list of its processes, which `ray stop` kills
    processes = text("autoscaler/_private/constants.py")
    for name in (nodes.RAYLET, nodes.GCS_SERVER, nodes.WORKER_SCRIPT, nodes.TITLE_PREFIX):
        assert f'"{name}"' in processes, f"Ray no longer names its process {name!r}"
    services = text("_private/services.py")
    for flag in (nodes.NODE_ID_FLAGS[0], nodes.GCS_PORT_FLAG, nodes.NODE_IP_FLAGS[0]):
        assert f'"{flag}=' in services, f"Ray no longer starts its daemons with {flag}"
    ray_constants = text("_private/ray_constants.py")
    titles = set(re.findall(r'^AGENT_PROCESS_TYPE_\w+ = "([^"]+)"', ray_constants, re.M))
    assert titles <= set(nodes.AGENT_TITLES), f"Ray titles its agents {sorted(titles)}"
    scripts = text("scripts/scripts.py")  # what `ray stop` prints (rlsim.ray_internals.stop)
    assert f'"{stop.REFUSED} `{{}}` due to {{}}"' in scripts, "ray stop words a refusal anew"
    for words in stop.STOPPED:
        assert f'"{words} {{' in scripts or f'f"{words} {{' in scripts, \
            f"ray stop no longer says {words!r}"
    assert f'WORKER_PROCESS_TYPE_IDLE_WORKER = "{nodes.IDLE_TITLE}"' in ray_constants
    io = set(re.findall(r'^WORKER_PROCESS_TYPE_\w+_NAME = "([^"]+)"', ray_constants, re.M))
    assert io == set(nodes.IO_WORKER_NAMES), f"Ray names its I/O workers {sorted(io)}"
    assert f'SESSION_LATEST = "{session.LATEST}"' in ray_constants
    assert '"sockets"' in text("_private/node.py"), "Ray's session dir has no sockets folder"
    nvidia = text("_private/accelerators/nvidia_gpu.py")
    assert f'NOSET_CUDA_VISIBLE_DEVICES_ENV_VAR = "{settings.NOSET_CUDA_VAR}"' in nvidia
