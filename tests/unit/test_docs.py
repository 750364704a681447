"""The docs cannot drift from the code: the site builds with warnings as errors (its reference
pages generated from the code), the README stays a front page, every scenario in the docs is read
as ``rlsim validate`` reads it (a fragment of one, a section say, is checked against the scenario
files' JSON Schema inside a minimal scenario), and every ``rlsim`` command line in them names a
command that exists with options it takes."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
import typer
import yaml
from jsonschema import Draft202012Validator

from rlsim import commands
from rlsim.plugin.session import require
from rlsim.scenario.jsonschema import scenario_schema
from rlsim.scenario.loader import parse, read

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
MINIMAL = {"name": "doc", "trainer": {"config": "grpo_tiny"}, "expect": [{"completes": True}]}


def blocks(lang: str) -> list[tuple[str, int, str]]:
    found = []
    for path in DOCS:
        text = path.read_text()
        for m in FENCE.finditer(text):
            if m.group(1) == lang:
                found.append((str(path.relative_to(ROOT)), text[:m.start()].count("\n") + 1,
                              m.group(2)))
    return found


MKDOCS = Path(sys.executable).parent / "mkdocs"


def build_site(config: Path, site: Path) -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` of ``config`` into ``site``, its log captured. Never ``-q``:
    MkDocs 1.6 counts the warnings that strict mode turns into errors from its log, and ``-q``
    drops them from it, so a quiet strict build passes with broken links."""
    require(None if MKDOCS.exists() else
            f"mkdocs is not installed beside {sys.executable} (the dev extra installs it: "
            "bash ci/setup.sh)")
    return subprocess.run([str(MKDOCS), "build", "--strict", "-f", str(config), "-d", str(site)],
                          cwd=config.parent, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def test_the_site_builds_with_warnings_as_errors(tmp_path):
    out = build_site(ROOT / "mkdocs.yml", tmp_path / "site")
    log = out.stdout + out.stderr
    assert out.returncode == 0 and "WARNING" not in log, log
    faults = (tmp_path / "site" / "reference" / "faults" / "index.html").read_text()
    assert "slow_storage" in faults and "write_mbps" in faults  # generated from the code


@pytest.mark.parametrize("link,words", [
    ("[gone](../concepts/cluster.md)", ["../concepts/cluster.md", "not found"]),
    ("[gone](concepts/cluster.md#no-such-heading)", ["no-such-heading", "anchor"]),
    ("[gone](nowhere.md)", ["nowhere.md", "not found"]),
])
def test_a_broken_link_fails_the_site_build(tmp_path, link, words):
    """The build above can fail: the same docs with one bad link (a page climbing out of the
    docs, an anchor that no heading makes, a page that does not exist) do not build."""
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "ray-releases.md"
    page.write_text(page.read_text() + f"\nSee {link}.\n")
    out = build_site(tmp_path / "mkdocs.yml", tmp_path / "site")
    log = out.stdout + out.stderr
    assert out.returncode != 0 and "Aborted with 1 warnings in strict mode" in log, log
    assert all(w in log for w in words), log


def test_the_readme_is_a_front_page_with_the_two_set_up_commands():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) < 8 * 1024
    assert len(re.findall(r"(?m)^bash ci/setup.sh && ", readme)) == 2


SCENARIO_BLOCKS = [b for b in blocks("yaml") if yaml.safe_load(b[2]) and
                   isinstance(yaml.safe_load(b[2]), dict)]


@pytest.mark.parametrize("where,line,text", SCENARIO_BLOCKS,
                         ids=[f"{w}:{n}" for w, n, _ in SCENARIO_BLOCKS])
def test_every_scenario_in_the_docs_is_valid(where, line, text):
    doc = parse(text, where)  # as rlsim reads a scenario: `on:` is a key, not True
    if {"name", "trainer", "expect"} <= set(doc):  # a whole scenario: as rlsim validate reads it
        read(text, ROOT / "scenarios" / f"doc_{line}.yaml")
        return
    fields = scenario_schema()["properties"]
    if not set(doc) <= set(fields):
        pytest.skip(f"{where}:{line} is not a scenario (a workflow, a config)")
    errors = [e.message for e in Draft202012Validator(scenario_schema()).iter_errors(
        {**MINIMAL, **doc})]
    assert errors == [], f"{where}:{line}"


def _command_lines() -> list[tuple[str, int, str]]:
    found = []
    for where, line, text in blocks("bash"):
        text = re.sub(r"\\\n\s*", " ", text)  # a command continued on the next line
        for i, raw in enumerate(text.splitlines()):
            cmd = raw.split("  #")[0].split(" # ")[0].strip()
            cmd = re.sub(r"^(\.venv/bin/|\S*/bin/)", "", cmd)
            if cmd.startswith("rlsim "):
                found.append((where, line + 1 + i, cmd))
    return found


COMMANDS = _command_lines()
GROUP = typer.main.get_command(commands.app)


@pytest.mark.parametrize("where,line,cmd", COMMANDS, ids=[f"{w}:{n}" for w, n, _ in COMMANDS])
def test_every_rlsim_command_in_the_docs_exists_with_its_options(where, line, cmd):
    words = shlex.split(cmd)[1:]
    if not words or words[0].startswith("-"):
        return
    ctx = click.Context(GROUP, info_name="rlsim")
    command = GROUP.get_command(ctx, words[0])
    assert command is not None, f"{where}:{line}: no command rlsim {words[0]}"
    if words[0] in ("fault", "plan"):  # their other options belong to the fault, the framework
        return
    takes = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
    given = {w.split("=")[0] for w in words[1:] if w.startswith("-")}
    assert given <= takes, f"{where}:{line}: rlsim {words[0]} takes no {sorted(given - takes)}"
