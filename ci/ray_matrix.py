"""The Ray matrix: rlsim's wheel on each Ray release it claims, run as a user runs it.

    python ci/ray_matrix.py                      # the releases below, every step
    python ci/ray_matrix.py --releases 2.48.0 --steps probe,main
    python ci/ray_matrix.py --all --docs docs/reference/ray-releases.md

For each release: a virtualenv in ``.matrix/ray-<release>`` with that Ray (pip, ``--no-deps``)
and rlsim's wheel built from this checkout, taking every other package from this environment's
site-packages (a ``.pth`` line: torch, DeepSpeed, Ray's own dependencies; each venv costs only
Ray). Ray's declared requirements are checked against what the venv sees. Then, from a project
folder outside the repository:

- ``probe``: ``rlsim ray --json``, the capabilities in force and Ray's plain path taken, and
  the probes' own tests (tests/unit/test_ray_internals.py) on that release;
- ``bringup``: ``rlsim cluster --nodes 4 --fake-gpus 8 --detach``, its ready time, then down;
- ``compliance``: the backend compliance suite (tests/integration/test_backend_compliance.py);
- ``main``: the README main job, ``rlsim run node_failure_mid_run.yaml``;
- ``partition``: ``rlsim run partitioned_worker.yaml``;
- ``ray_train``: ``rlsim run ray_train_node_lost.yaml`` (an unmodified Ray Train job).

``no_leaks`` is a check of every scenario run. Each scenario's verdicts (every check, ok or not)
are compared with the first release's of the run (put the newest first to compare with it).
On a Ray without token auth (below 2.52) run as root, the matrix says
``RLSIM_ALLOW_UNAUTHENTICATED=1`` for its own clusters, and the table marks the row.
``--plain`` adds a row for the first release with every acceleration off (RLSIM_RAY_PLAIN=all):
the plain path's bring-up and verdicts beside the fast path's, in the same run.

One table at the end; ``--out`` keeps each release's results as JSON, ``--docs`` writes the
docs page of what works per release. Exit 1 when any step failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import site
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _releases():
    """rlsim's own statement of the Ray releases it is proven on (rlsim/ray_internals/
    releases.py, standard library only), read from this checkout without importing rlsim."""
    path = ROOT / "rlsim" / "ray_internals" / "releases.py"
    spec = importlib.util.spec_from_file_location("rlsim_ray_releases", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RELEASES = _releases()
# The newest patch of each Ray minor release the matrix knows: when Ray ships a release, or the
# proven range (RELEASES.PROVEN) moves, name its newest patch here
NEWEST_PATCH = {"2.48": "2.48.0", "2.49": "2.49.2", "2.50": "2.50.1", "2.51": "2.51.2",
                "2.52": "2.52.1", "2.53": "2.53.0", "2.54": "2.54.1", "2.55": "2.55.1",
                "2.56": "2.56.1", "2.57": "2.57.1", "2.58": "2.58.1", "2.59": "2.59.0",
                "2.60": "2.60.0"}
# releases our users pin, run by default beside the newest and the oldest rlsim claims (the
# oldest is ROLL's pin too): rlsim's old floor, the first with token auth, OpenRLHF's and SkyRL's
PINS = ["2.50.0", "2.52.1", "2.55.0", "2.57.0"]


def _minor(release: str) -> tuple[int, int]:
    major, minor = release.split(".")[:2]
    return int(major), int(minor)


def proven_minors() -> list[str]:
    """Every minor release from the first to the last rlsim claims, oldest first."""
    (major, first), (last_major, last) = map(_minor, RELEASES.PROVEN)
    if major != last_major:
        raise SystemExit(f"ci/ray_matrix.py: the proven range {RELEASES.PROVEN} spans two major "
                         "releases: list its minor releases in proven_minors")
    return [f"{major}.{m}" for m in range(first, last + 1)]


def unknown_minors() -> list[str]:
    """The minor releases rlsim claims whose newest patch the matrix does not know."""
    return [m for m in proven_minors() if m not in NEWEST_PATCH]


# --all: the newest patch of every minor release rlsim claims, the newest release first (the
# reference the others' verdicts are compared with)
_KNOWN = [NEWEST_PATCH[m] for m in proven_minors() if m in NEWEST_PATCH]
EVERY = _KNOWN[-1:] + _KNOWN[:-1]
# the releases the matrix proves by default: the newest, the oldest, and the pins in the range
DEFAULT = EVERY[:1] + [f"{RELEASES.FIRST}.0"] + [
    p for p in PINS if _minor(RELEASES.FIRST) <= _minor(p) <= _minor(RELEASES.LAST)]
STEPS = ["probe", "bringup", "compliance", "main", "partition", "ray_train"]
SCENARIOS = {"main": "node_failure_mid_run", "partition": "partitioned_worker",
             "ray_train": "ray_train_node_lost"}
TOKEN_AUTH_SINCE = _minor(RELEASES.TOKEN_AUTH_SINCE)


def build_wheel(into: Path) -> Path:
    """rlsim's wheel, built from a copy of this checkout (a build writes beside its source)."""
    source = into / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".matrix", "reports", "build", "*.egg-info", "__pycache__",
        ".pytest_cache", "site"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", str(source), "-w", str(into / "dist")], check=True,
                   capture_output=True, timeout=600)
    return next((into / "dist").glob("rlsim-*.whl"))


def overlay_venv(venv: Path, ray: str, wheel: Path | None) -> Path:
    """A virtualenv at ``venv`` with Ray ``ray`` (and rlsim's ``wheel``) of its own, every other
    package from this environment's site-packages; its python. Kept between runs: a venv whose
    Ray is already ``ray`` gets only the wheel again."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                       timeout=120)
    own = Path(subprocess.run([str(python), "-c", "import site; "
                               "print(site.getsitepackages()[0])"], capture_output=True,
                              text=True, check=True).stdout.strip())
    (own / "rlsim-matrix-deps.pth").write_text(site.getsitepackages()[0] + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
           "--no-compile", "--disable-pip-version-check"]
    if not (own / f"ray-{ray}.dist-info").is_dir():  # its own, not the shared packages' Ray
        subprocess.run([*pip, "--ignore-installed", f"ray=={ray}"], check=True, timeout=900)
        if os.environ.get("PYTHONDONTWRITEBYTECODE"):
            # once, at set-up: with it set, every process would compile the Ray modules it
            # imports again (without it, the first import of each writes its bytecode; all of
            # Ray compiled here was 5 s of CPU, most of it modules no run imports)
            subprocess.run([str(python), "-m", "compileall", "-q", "-j", "0", str(own / "ray")],
                           capture_output=True, timeout=900)
    if wheel is not None:
        subprocess.run([*pip, "--force-reinstall", str(wheel)], check=True, timeout=300)
    return python


UNMET = r'''
import importlib.metadata as m
from packaging.requirements import Requirement
out = []
for text in m.requires("ray") or []:
    req = Requirement(text)
    if req.marker and not any(req.marker.evaluate({"extra": e})
                              for e in ("", "default", "train", "tune")):
        continue
    try:
        have = m.version(req.name)
    except m.PackageNotFoundError:
        out.append(f"{req} (not installed)")
        continue
    if req.specifier and not req.specifier.contains(have, prereleases=True):
        out.append(f"{req} (have {have})")
print("\n".join(sorted(set(out))))
'''


def unmet_requirements(python: Path) -> list[str]:
    """Ray's declared requirements (with its default, train and tune extras) that the venv's
    packages do not meet."""
    out = subprocess.run([str(python), "-c", UNMET], capture_output=True, text=True,
                         check=True)
    return [line for line in out.stdout.splitlines() if line]


def project(into: Path, source: Path) -> Path:
    """A user's project folder outside the repository, with the scenarios the matrix runs, from
    ``source``: the copy of the checkout the wheel was built from (the files the wheel knows,
    whatever the checkout holds by the time a later release runs)."""
    into.mkdir(parents=True, exist_ok=True)
    for name in SCENARIOS.values():
        shutil.copy(source / "scenarios" / f"{name}.yaml", into)
    shutil.copytree(source / "scenarios" / "trainers", into / "trainers", dirs_exist_ok=True)
    return into


def _env(python: Path, ray: str, plain: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST", "RLSIM_STRICT", "VIRTUAL_ENV", "RLSIM_RAY_PLAIN"))}
    env["PATH"] = os.pathsep.join([str(python.parent), env.get("PATH", os.defpath)])
    if tuple(map(int, ray.split(".")[:2])) < TOKEN_AUTH_SINCE and os.geteuid() == 0:
        env["RLSIM_ALLOW_UNAUTHENTICATED"] = "1"
    if plain:
        env["RLSIM_RAY_PLAIN"] = "all"
    return env


def _run(cmd: list[str], cwd: Path, env: dict, timeout: float) -> tuple[int, str, float]:
    t0 = time.monotonic()
    try:
        done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout)
        code, out = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as e:
        code, out = 124, f"timed out after {timeout:.0f} s\n{e.stdout or ''}{e.stderr or ''}"
    return code, out, time.monotonic() - t0


CHECK_LINE = re.compile(r"^\s+(ok|no)\s+(\w+):", re.M)


def run_release(ray: str, steps: list[str], wheel: Path, work: Path, plain: bool = False) -> dict:
    """Every step of the matrix on one Ray release; a dict of what each did."""
    label = f"{ray}{' plain' if plain else ''}"
    python = overlay_venv(ROOT / ".matrix" / f"ray-{ray}", ray, wheel)
    where = subprocess.run([str(python), "-c", "import ray, rlsim; print(ray.__version__); "
                            "print(rlsim.__file__)"], capture_output=True, text=True,
                           check=True, cwd=work).stdout.split()
    assert where[0] == ray and where[1].startswith(str(python.parents[1])), where  # the wheel
    res: dict = {"release": label, "unmet": unmet_requirements(python), "steps": {}}
    env = _env(python, ray, plain)
    res["opted_in_open"] = "RLSIM_ALLOW_UNAUTHENTICATED" in env
    proj = project(work / f"project-{label.replace(' ', '-')}", work / "source")
    rlsim = str(python.parent / "rlsim")
    for step in steps:
        print(f"[ray {label}] {step} ...", flush=True)
        if step == "probe":
            code, out, secs = _run([rlsim, "ray", "--json"], proj, env, 120)
            probe = json.loads(out[out.index("{"):]) if "{" in out else {}
            res["in_force"], res["plain"] = probe.get("in_force", []), probe.get("plain", {})
            # the probes' own tests on this release: every capability where expected
            tests = _run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          str(work / "source" / "tests/unit/test_ray_internals.py")], proj, env,
                         300)
            code, out, secs = code or tests[0], out + tests[1], secs + tests[2]
        elif step == "bringup":
            code, out, secs = _run([rlsim, "cluster", "--nodes", "4", "--fake-gpus", "8",
                                    "--detach", "--name", "matrix"], proj, env, 300)
            m = re.search(r"ready in ([\d.]+) s", out)
            res["bringup_s"] = float(m.group(1)) if m else None
            down = _run([rlsim, "down", "matrix"], proj, env, 120)
            code = code or down[0]
            out += down[1]
        elif step == "compliance":
            code, out, secs = _run(
                [str(python), "-m", "pytest", str(work / "source" / "tests/integration/"
                                                  "test_backend_compliance.py"),
                 "-q", "-p", "no:cacheprovider", "-x"], proj, env, 1800)
        else:
            code, out, secs = _run([rlsim, "run", f"{SCENARIOS[step]}.yaml"], proj, env, 900)
            res.setdefault("verdicts", {})[step] = dict(
                (name, ok == "ok") for ok, name in CHECK_LINE.findall(out))
            if step == "main":
                res["main_s"] = round(secs, 1)
        res["steps"][step] = {"ok": code == 0, "seconds": round(secs, 1),
                              "tail": out.strip().splitlines()[-25:]}
        print(f"[ray {label}] {step}: {'PASS' if code == 0 else 'FAIL'} ({secs:.1f} s)",
              flush=True)
    return res


def table(results: list[dict], steps: list[str]) -> str:
    first = results[0].get("verdicts", {}) if results else {}
    head = ["Ray", *steps, "bring-up 4x8 (s)", "main job (s)", "in force", "plain path",
            "same verdicts as " + (results[0]["release"] if results else "")]
    rows = []
    for r in results:
        cells = [r["release"] + (" (open)" if r.get("opted_in_open") else "")]
        cells += ["pass" if r["steps"].get(s, {}).get("ok") else
                  ("-" if s not in r["steps"] else "FAIL") for s in steps]
        cells += [f"{r['bringup_s']:.2f}" if r.get("bringup_s") else "-",
                  f"{r['main_s']:.1f}" if r.get("main_s") else "-",
                  str(len(r.get("in_force", []))),
                  ", ".join(sorted(r.get("plain", {}))) or "none"]
        same = [s for s in first if r.get("verdicts", {}).get(s) == first[s]]
        cells.append("yes" if len(same) == len(first) else
                     "no: " + ", ".join(s for s in first if s not in same))
        rows.append(cells)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(c) + " |" for c in rows]
    return "\n".join(lines)


def docs_page(results: list[dict], steps: list[str]) -> str:
    unmet = [f"- Ray {r['release']}: {', '.join(r['unmet'])}" for r in results if r["unmet"]]
    plain = sorted({(r["release"], name, why) for r in results
                    for name, why in r.get("plain", {}).items()})
    return "\n".join([
        "# Ray releases", "",
        "rlsim is proven on the Ray releases below by its Ray matrix (`python ci/ray_matrix.py`,",
        "generated this page): each row is rlsim's wheel installed beside that Ray in a fresh",
        "virtualenv, run from a project folder outside the repository. `pyproject.toml` declares",
        f"the same range (`ray[default]{RELEASES.SUPPORTED_TEXT}`); `rlsim doctor` warns outside "
        "it, and",
        "`rlsim ray` prints what rlsim uses of the Ray you have installed.", "",
        "(open): a Ray without token authentication, run as root: the matrix opted in with",
        "`RLSIM_ALLOW_UNAUTHENTICATED=1` (see [simulated nodes](concepts/cluster.md)).", "",
        table(results, steps), "",
        "## Accelerations on Ray's plain path", "",
        *(f"- Ray {rel}: `{name}`: {why}" for rel, name, why in plain), "",
        *(["## Ray's declared requirements not met by the matrix's packages", "", *unmet, ""]
          if unmet else []),
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--releases", help="comma-separated Ray releases (first is the reference)")
    ap.add_argument("--all", action="store_true", help="the newest patch of every minor release")
    ap.add_argument("--steps", default=",".join(STEPS), help=f"of {','.join(STEPS)}")
    ap.add_argument("--plain", action="store_true", help="also the first release with "
                    "RLSIM_RAY_PLAIN=all (Ray's plain path everywhere)")
    ap.add_argument("--out", type=Path, help="a folder for each release's results as JSON")
    ap.add_argument("--docs", type=Path, help="write the docs page of the releases here")
    args = ap.parse_args(argv)
    if unknown := unknown_minors():
        ap.error(f"rlsim claims Ray {', '.join(unknown)} (rlsim/ray_internals/releases.py), "
                 "whose newest patch NEWEST_PATCH in ci/ray_matrix.py does not name: add it")
    releases = args.releases.split(",") if args.releases else (EVERY if args.all else DEFAULT)
    steps = [s for s in args.steps.split(",") if s]
    if unknown := set(steps) - set(STEPS):
        ap.error(f"unknown steps {sorted(unknown)}; known: {','.join(STEPS)}")
    results = []
    with tempfile.TemporaryDirectory(prefix="rlsim-matrix-") as tmp:
        work = Path(tmp)
        wheel = build_wheel(work)
        plan = [(r, False) for r in releases] + ([(releases[0], True)] if args.plain else [])
        for ray, plain in plan:
            res = run_release(ray, steps, wheel, work, plain)
            results.append(res)
            if args.out:
                args.out.mkdir(parents=True, exist_ok=True)
                name = res["release"].replace(" ", "-")
                (args.out / f"ray-{name}.json").write_text(json.dumps(res, indent=1))
    print(table(results, steps))
    for r in results:
        for step, s in r["steps"].items():
            if not s["ok"]:
                print(f"\n--- Ray {r['release']} {step} FAILED; its last lines:\n" +
                      "\n".join(s["tail"]))
        if r["unmet"]:
            print(f"\nRay {r['release']}: requirements not met: {'; '.join(r['unmet'])}")
    if args.docs:
        args.docs.write_text(docs_page(results, steps) + "\n")
    return 0 if all(s["ok"] for r in results for s in r["steps"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
