"""What every launcher ``rlsim launch`` writes is made from: the cluster to start and what to run
on it. Checked once here; each launcher (slurm, kuberay, skypilot, dstack) only renders it."""

from __future__ import annotations

import posixpath
import shlex

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rlsim.host.home import SHARED_DIRS, SYSTEM_TREES


class Launch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    nodes: int = Field(ge=1, le=4096, description="GPU nodes, the head included")
    gpus_per_node: int = Field(ge=0, le=64)
    python: str = Field(description="the Python on every node that has rlsim and Ray installed "
                        "(an absolute path, or a command the image's PATH finds)")
    scenarios: list[str] = Field(min_length=1, description="scenario files or folders, as the "
                                 "nodes see them")
    report_dir: str = Field(description="a directory every node shares: reports, Ray's token")
    image: str | None = Field(None, description="a container image every node runs")
    accelerator: str = Field("H100", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$",
                             description="the GPU type to ask for (SkyPilot, dstack)")
    time: str = Field("01:00:00", description="the job's time limit, in any of Slurm's forms "
                      "(MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS); written as D-HH:MM:SS")
    port: int = Field(6379, ge=1024, le=65535, description="the head's GCS port")
    wait_s: float = Field(600, ge=1, le=86400, description="bound on the nodes joining")
    allow_disruptive: bool = False

    @field_validator("python", "report_dir", "image", "accelerator", "time")
    @classmethod
    def _one_line(cls, v: str | None) -> str | None:
        """A value written into a shell script or a YAML file: what neither can carry inside a
        quoted word is refused (a newline would start a line of its own, a key or a command)."""
        if v is not None and (bad := next((c for c in v if c in "\n\r\0" or
                                           not c.isprintable()), None)):
            raise ValueError(f"{v!r} holds {bad!r}, which a launcher cannot write inside one "
                             "word of a script or a YAML value; give it without")
        return v

    @field_validator("scenarios")
    @classmethod
    def _one_line_each(cls, v: list[str]) -> list[str]:
        return [cls._one_line(s) for s in v]

    @field_validator("python")
    @classmethod
    def _python(cls, v: str) -> str:
        if "/" in v and not v.startswith("/"):
            raise ValueError(f"{v!r}: give an absolute path or a command name (python3)")
        if not v.startswith("/") and any(c.isspace() for c in v):
            raise ValueError(f"{v!r} is written as one command name; give the interpreter alone "
                             "(flags such as -u have no place here), or its absolute path")
        return v

    @field_validator("time")
    @classmethod
    def _time(cls, v: str) -> str:
        seconds = slurm_seconds(v)
        if not 1 <= seconds <= MAX_TIME_S:
            raise ValueError(f"a job's time limit is 1 second to {MAX_TIME_S // 86400} days")
        days, rest = divmod(seconds, 86400)
        clock = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
        return f"{days}-{clock}" if days else clock

    @field_validator("report_dir")
    @classmethod
    def _absolute(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"{v!r} is not an absolute path: every node resolves it the same "
                             "way only if it is absolute")
        if "," in v or ":" in v:  # pyxis --container-mounts=SRC:DST,SRC:DST
            raise ValueError(f"{v!r} holds ',' or ':', which separate Slurm's container mounts "
                             "(and Docker's volumes); give a directory without them")
        return mount_point(v)

    @property
    def seconds(self) -> int:
        """The time limit in seconds."""
        return slurm_seconds(self.time)


# Folders of the system itself: a shared volume mounted at one (or inside one of the system's
# own trees) hides the image's own files in a privileged pod or container, and runs would write
# among them; the folders everybody shares are refused as they are for an rlsim home
SYSTEM_DIRS = SYSTEM_TREES + SHARED_DIRS


def mount_point(path: str) -> str:
    """``path`` (absolute) normalised as the kernel resolves it (``/../../etc`` is ``/etc``),
    ValueError when it is the root, a system folder or inside one of the system's own trees
    (``/proc/x``, ``/usr/lib``): a folder of its own such as /rlsim or /mnt/shared is meant."""
    normal = "/" + posixpath.normpath(path).lstrip("/")
    inside = next((t for t in SYSTEM_TREES if normal.startswith(t + "/")), None)
    if normal == "/" or normal in SYSTEM_DIRS or inside:
        what = ("the root folder" if normal == "/" else f"inside {inside}, a system folder"
                if inside else "a system folder")
        said = "" if normal == path else f" (as {normal})"
        raise ValueError(f"{path!r}{said} is {what}: a shared volume mounted there hides the "
                         "system's own files and the runs would write among them; fix: give a "
                         "folder of its own, e.g. /rlsim or /mnt/rlsim")
    return normal


MAX_TIME_S = 365 * 86400
TIME_FIX = ("write it as Slurm does: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS "
            "(e.g. 01:00:00)")


def slurm_seconds(text: str) -> int:
    """A time limit in any of Slurm's forms, in seconds; ValueError naming the forms otherwise.
    Seconds are below 60, so are minutes after hours, and hours after days."""
    days, dash, clock = text.strip().rpartition("-")
    fields = clock.split(":")
    if len(fields) > 3 or not all(f.isascii() and f.isdigit()
                                  for f in fields + ([days] if dash else [])):
        raise ValueError(TIME_FIX)
    n = [int(f) for f in fields]
    if dash:  # D-HH, D-HH:MM, D-HH:MM:SS
        h, m, sec = (n + [0, 0])[:3]
    else:  # MM, MM:SS, HH:MM:SS
        h, m, sec = (0, n[0], 0) if len(n) == 1 else (0, *n) if len(n) == 2 else tuple(n)
    hours_given = dash or len(n) == 3
    if sec > 59 or (hours_given and m > 59) or (dash and h > 23):
        raise ValueError(f"seconds, minutes after hours and hours after days are below 60, "
                         f"60 and 24; {TIME_FIX}")
    return int(days or 0) * 86400 + h * 3600 + m * 60 + sec


def head_steps(launch: Launch, address: str, report: str, on_head: str = "") -> list[str]:
    """The shell lines the head runs once Ray is up on every node (``address``: the GCS, a shell
    expression; ``report``: this run's report directory): wait for the nodes, the doctor, the
    scenarios; the last line leaves the scenarios' exit status in ``$status``. ``on_head``
    prefixes each command that must run on the head node (Slurm: a job step there)."""
    py, allow = shlex.quote(launch.python), " --allow-disruptive" if launch.allow_disruptive else ""
    scenarios = " ".join(shlex.quote(s) for s in launch.scenarios)
    return [
        f'mkdir -p "{report}"',
        f'{on_head}{py} -m rlsim.launch.wait --address "{address}" --nodes {launch.nodes} '
        f"--gpus-per-node {launch.gpus_per_node} --timeout {int(launch.wait_s)} || exit 3",
        f'{on_head}{py} -m rlsim doctor --ray-address "{address}" --json '
        f'> "{report}/doctor.json"',
        f'echo "rlsim launch: doctor exited $? (the nodes and findings: {report}/doctor.json)"',
        f'{on_head}{py} -m rlsim run {scenarios} --backend real --ray-address "{address}" '
        f'--report "{report}"{allow}; status=$?',
        f'echo "rlsim launch: scenarios exited $status; report in {report}"',
    ]


def rank_script(launch: Launch, rank: str, head_ip: str, my_ip: str, gpus: str,
                run_id: str) -> str:
    """The one script every node of a multi-node task runs (SkyPilot, dstack): node ``rank`` 0
    starts the Ray head, runs :func:`head_steps`, stops its Ray and exits with the scenarios'
    status; the others join the head and block until it goes. Arguments are shell expressions
    over the platform's own variables; the user's values (Python, report directory) are quoted
    once, into variables."""
    steps = "\n  ".join(head_steps(launch, "$HEAD_IP:$PORT", "$REPORT"))
    return f"""set -u
# the task's own network: Ray without auth here (rlsim's token auth is for shared hosts)
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0
PY={shlex.quote(launch.python)}
RAY="$(dirname "$(command -v "$PY")")/ray"
HEAD_IP="{head_ip}"
MY_IP="{my_ip}"
PORT={launch.port}
REPORT={shlex.quote(launch.report_dir)}/"{run_id}"
RAY_TMP="/tmp/ray-rlsim-{run_id}"
if [ "{rank}" = 0 ]; then
  # however the head's part ends (a failed wait included), this task's Ray stops: only the
  # processes of its temp dir, never `ray stop`; the workers' `ray start --block` then return
  trap '"$PY" -m rlsim.launch.stop "$RAY_TMP"' EXIT
  "$RAY" start --head --port "$PORT" --node-ip-address "$HEAD_IP" --temp-dir "$RAY_TMP" \\
    --num-gpus "{gpus}"
  {steps}
  exit $status
else
  "$RAY" start --block --address "$HEAD_IP:$PORT" --node-ip-address "$MY_IP" --num-gpus "{gpus}"
  exit 0  # the head's exit status is the run's; a worker ends when the head's Ray goes
fi
"""


def schema_problems(schema: dict, doc: dict) -> list[str]:
    """Where ``doc`` breaks a platform's JSON schema, one line each (empty: valid). The
    validator is the one the schema declares (``$schema``), draft 7 where it declares none
    (Kubernetes' OpenAPI schemas)."""
    import jsonschema

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    return [f"{'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"
            for e in cls(schema).iter_errors(doc)]
