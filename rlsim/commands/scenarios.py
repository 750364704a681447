"""``rlsim run``, ``validate`` and ``report``: scenarios from the command line, with live progress,
and their report."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.live import Live
from rich.table import Table

from rlsim.backends import DEFAULT, described, unknown
from rlsim.backends.base import Unsupported
from rlsim.commands.console import plain_console, styled
from rlsim.files import shown
from rlsim.result import ScenarioResult, write_summary
from rlsim.scenario.loader import ScenarioError, discover, load, parse_overrides

console = plain_console(soft_wrap=True)


def _paths(paths: list[Path]) -> list[Path]:
    """The scenario files named, folders expanded; a folder without any is an error."""
    out: list[Path] = []
    for p in paths:
        found = discover(p) if p.is_dir() else [p]
        if not found:
            raise ScenarioError(f"{shown(p)}: a directory with no scenario files (*.yaml) in "
                                "it; give a scenario file or a directory holding some, e.g. "
                                "scenarios/")
        out += found
    return out


def _refuse(e: ScenarioError) -> None:
    """Print a scenario's problems as they are: its text is the file's, never rich markup."""
    console.print(str(e), style="red", markup=False, highlight=False)


def _load_all(paths: list[Path], overrides: dict | None = None) -> list:
    """Every scenario named, validated (with ``overrides``, ``--override``, as if the files
    held them); exit 2 after printing every problem found."""
    try:
        files = _paths(paths)
    except ScenarioError as e:
        _refuse(e)
        raise typer.Exit(2) from None
    scenarios, bad = [], 0
    for path in files:
        try:
            scenarios.append((path, load(path, overrides)))
        except ScenarioError as e:
            _refuse(e)
            bad += 1
    first: dict[str, Path] = {}
    for path, sc in scenarios:  # one report folder per name: a second would take the first's
        if sc.name in first:
            _refuse(ScenarioError(f"{shown(path)}:1: name: two scenarios are named {sc.name!r} "
                                  f"({shown(first[sc.name])} and {shown(path)}); their "
                                  "results would share one report folder: rename one"))
            bad += 1
        first.setdefault(sc.name, path)
    if bad:
        raise typer.Exit(2)
    return scenarios


Paths = Annotated[list[Path], typer.Argument(help="scenario files or folders")]


def validate(paths: Paths) -> None:
    """Check scenario files without running them: the schema, then the trainer config with the
    scenario's overrides (data, model, resume, placement), as the run would start it. Exit 0 when
    all are valid; 2 when one is not (each problem as ``file:line: field: what and the fix``) or
    a directory holds no scenarios."""
    for path, sc in _load_all(paths):
        console.print(f"ok  {shown(path)}: {sc.name} ({len(sc.faults)} faults, "
                      f"{len(sc.expect)} checks)")


def schema(
    out: Annotated[Path | None, typer.Option("--out", help="write it to this file (else print "
                                             "it)")] = None,
) -> None:
    """Print the JSON Schema of scenario files (the faults and checks installed here included),
    for an editor to complete keys and flag mistakes as you type: point a scenario at it with a
    first line ``# yaml-language-server: $schema=<path to the schema>``. Exit 0."""
    from rlsim.files import write_file
    from rlsim.scenario.jsonschema import text

    body = text()
    if out is None:
        typer.echo(body, nl=False)
        return
    write_file(out, body)
    console.print(f"wrote {out}", markup=False, highlight=False)


def run(
    paths: Paths,
    backend: str = typer.Option(None, help=f"One of: {described()}. Default: each scenario's "
                                f"cluster.backend ({DEFAULT} unless it names one)."),
    ray_address: str = typer.Option(None, help="the real cluster's GCS address (--backend real)"),
    report: Annotated[Path | None, typer.Option(help="write timelines and summary.json")] = None,
    seed: int = typer.Option(None, help="override every scenario's seed (replay)"),
    fresh_twin: bool = typer.Option(False, "--fresh-twin", help="train each fault-free twin "
                                    "again (matches_baseline, throughput_within), replacing the "
                                    "one an earlier run kept under the rlsim home"),
    no_reuse: bool = typer.Option(False, "--no-reuse", help="a fresh cluster per scenario "
                                  "(default: scenarios of one shape share one, checked clean)"),
    slow: bool = typer.Option(False, "--slow", help="also run the scenarios tagged slow that a "
                              "folder holds (a file named on its own always runs)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="list each scenario as runnable or "
                                 "skipped, with the reason, touching no cluster"),
    override: Annotated[list[str] | None, typer.Option(
        "--override", metavar="KEY=VALUE", help="a reference-trainer override for every scenario "
        "that runs it (repeatable), e.g. step_delay_s=0.1: the same stories on slower "
        "steps")] = None,
    allow_disruptive: bool = typer.Option(
        False, "--allow-disruptive", help="with --backend real: run scenarios whose faults kill "
        "nodes or processes, take GPU memory or damage checkpoints (refused otherwise)"),
) -> None:
    """Run scenarios; exit 0 when every expectation holds, 1 when one fails, 2 for bad input
    (or, on --backend real, disruptive faults without --allow-disruptive; or, as root on a Ray
    without token auth, clusters nobody could protect without RLSIM_ALLOW_UNAUTHENTICATED=1)."""
    from rlsim.scenario.session import Session

    named = {p.resolve() for p in paths if p.is_file()}
    try:
        extra = parse_overrides(override or [])
    except ValueError as e:
        console.print(str(e), style="red", markup=False, highlight=False)
        raise typer.Exit(2) from None
    session = Session(backend=backend, ray_address=ray_address, slow=slow,
                      allow_disruptive=allow_disruptive, reuse=not no_reuse,
                      fresh_twin=fresh_twin)
    scenarios = []
    for path, sc in _load_all(paths, extra):  # all valid before anything starts
        if session.skips_slow(sc, named=path.resolve() in named):
            console.print(styled(("SKIP", "yellow"), f" {sc.name}: slow tier; name its file "
                                 "or pass --slow"))
        else:
            scenarios.append(sc)
    if backend is not None and (problem := unknown(backend)):
        console.print(problem, style="red", markup=False, highlight=False)
        raise typer.Exit(2)
    if dry_run:
        _dry_run(scenarios, session)
        return
    # in this order, each asked only if the one before let the run go: nothing connects to a
    # real cluster before its harm is refused, no cluster starts unprotected, and a foreign
    # cluster's address is one line now, not Ray's minutes of retries per scenario
    for ask in (lambda: session.disruptive_refusal(scenarios, "run the others"),
                lambda: session.auth_refusal(scenarios),
                lambda: session.address_problem(scenarios)):
        if refused := ask():
            console.print(refused, style="red", markup=False, highlight=False)
            raise typer.Exit(2)
    root = report or Path(f"reports/run-{time.strftime('%Y%m%d-%H%M%S')}")
    results: list[ScenarioResult] = []
    try:
        for sc in session.order(scenarios):
            if (result := _run_one(sc, root, seed, session)) is not None:
                results.append(result)
    finally:
        leaks = session.close()
    if leaks:
        console.print(styled(("kept clusters leaked at teardown:", "red"), " " + "; ".join(leaks)))
    write_summary(root, results)
    from rlsim.report import render_all

    problems: list[str] = []
    page, html_path, junit = render_all(root, results, problems, signoff=True)
    console.print(f"report: {page} (summary.json and <scenario>/timeline.jsonl beside it)",
                  markup=False, highlight=False)
    for problem in problems:  # a timeline rlsim wrote and cannot draw: its own bug, said
        console.print(f"report: {problem}", style="red", markup=False, highlight=False)
    console.print(f"sign-off: {html_path} and {junit}", markup=False, highlight=False)
    if leaks or not all(r.ok for r in results):
        raise typer.Exit(1)


def _dry_run(scenarios: list, session) -> None:
    """Each scenario as it would go on its backend: RUN, SKIP with the reason, or REFUSED."""
    from rlsim.scenario.runnable import check_runnable

    harmful = session.disruptive(scenarios)
    for sc in scenarios:
        try:
            check_runnable(sc, session.backend_of(sc))
        except Unsupported as e:
            console.print(f"SKIP     {sc.name}: {e}", markup=False, highlight=False)
            continue
        if sc.name in harmful:
            console.print(f"REFUSED  {sc.name}: {', '.join(harmful[sc.name])} on a real cluster; "
                          "needs --allow-disruptive", markup=False, highlight=False)
        else:
            faults = ", ".join(f.kind for f in sc.faults) or "no faults"
            console.print(f"RUN      {sc.name} ({faults})", markup=False, highlight=False)


def _run_one(sc, root: Path, seed, session) -> ScenarioResult | None:
    """Play one scenario and print its verdicts; None when it was skipped."""
    try:
        result = _run_live(sc, root, seed, session)
    except Unsupported as e:
        console.print(styled(("SKIP", "yellow"), f" {sc.name}: {e}"))
        return None
    console.print(styled(("PASS", "green") if result.ok else ("FAIL", "red"),
                         f" {sc.name} ({result.seconds:.1f} s)"))
    if result.goodput:
        from rlsim.goodput import said

        console.print(f"   {said(result.goodput)}", markup=False, highlight=False)
    for v in result.checks:
        console.print(styled("   ", ("ok", "green") if v.ok else ("no", "red"),
                             f"  {v.check}: {v.message}"))
        if not v.ok:
            for line in v.evidence[-10:]:
                console.print(f"        {line}", highlight=False, markup=False)
    return result


def follow(state: dict, e: dict) -> None:
    """The live table's state after event ``e``: step, reward, faults fired, restarts, last
    event. Every field an event type calls optional (:mod:`rlsim.events`) may be missing: what
    the table showed stays."""
    if e.get("type") == "step_end":
        state["step"] = e.get("step", state["step"])
        reward = (e.get("metrics") or {}).get("rollout/reward_mean")
        if isinstance(reward, int | float) and not isinstance(reward, bool):
            state["reward"] = float(reward)
    elif e.get("type") == "fault_injected":
        state["faults"] += 1
    elif e.get("type") == "restart":
        state["restarts"] += 1
    state["last"] = e.get("type", "?")


def _run_live(sc, root: Path, seed: int | None, session) -> ScenarioResult:
    """Play one scenario under a live table: step, reward, faults fired, restarts, last event."""
    state = {"step": 0, "reward": 0.0, "faults": 0, "restarts": 0, "last": "starting"}

    def show() -> Table:
        t = Table(title=f"scenario {sc.name}", show_header=False)
        for k, v in state.items():
            t.add_row(k, f"{v:.3f}" if isinstance(v, float) else str(v))
        return t

    with Live(show(), console=console, refresh_per_second=4, transient=True) as live:
        def progress(e: dict) -> None:
            follow(state, e)
            live.update(show())

        return session.play(sc, root / sc.name, seed=seed, on_progress=progress)


def report(
    root: Annotated[Path, typer.Argument(help="a folder written by rlsim run --report")],
    open_: bool = typer.Option(False, "--open", help="open it in a browser"),
    screenshots: Annotated[Path | None, typer.Option(
        "--screenshots", metavar="FOLDER", help="open it in headless Chromium: exit 1 on a "
        "script error, save the page and each scenario as PNGs")] = None,
) -> None:
    """Re-render ``report.html`` (and ``signoff.html``, ``junit.xml``) from a report folder, and
    open it or check it in headless Chromium. Exit 0: written; 1: Chromium saw a script error or
    an undrawn plot; 2: bad input (no such folder, records that do not parse, a timeline that
    cannot be drawn or a damaged doctor.json, both said on the pages written; no browser)."""
    from rlsim.report import render_all
    from rlsim.result import ResultInputError, read_results

    def refuse(message: str) -> typer.Exit:
        console.print(f"rlsim report: {shown(message)}", style="red", markup=False,
                      highlight=False, soft_wrap=True)
        return typer.Exit(2)

    if not root.is_dir():
        raise refuse(f"{root}: {'no such folder' if not root.exists() else 'not a folder'}; "
                     "give the folder rlsim run --report DIR wrote")
    if not os.path.lexists(root / "summary.json") and not list(root.glob("*/verdicts.json")):
        raise refuse(f"{root}: no summary.json (write one with rlsim run --report DIR)")
    if screenshots is not None:  # before anything is rewritten
        try:
            screenshots.mkdir(parents=True, exist_ok=True)
            probe = screenshots / ".rlsim-write-test"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise refuse(f"--screenshots {screenshots}: cannot write there "
                         f"({e.strerror or e}); give a folder this user can write") from None
    problems: list[str] = []
    try:  # every input read and every page made before any page is rewritten
        results = read_results(root)
        out, *signed = render_all(root, results, problems,
                                  signoff=os.path.lexists(root / "summary.json"))
        console.print(f"report: {shown(out)}", markup=False, highlight=False)
        if signed:
            console.print(f"sign-off: {shown(signed[0])} and {shown(signed[1])}", markup=False,
                          highlight=False)
    except ResultInputError as e:
        raise refuse(str(e)) from None
    except OSError as e:
        raise refuse(f"{root}: cannot write the report there ({e.strerror or e}); give a "
                     "folder this user can write") from None
    for problem in problems:
        console.print(f"rlsim report: {shown(problem)}", style="red", markup=False,
                      highlight=False, soft_wrap=True)
    if screenshots is not None:
        _check_in_browser(out, screenshots)
    if open_:
        import webbrowser

        if not webbrowser.open(out.resolve().as_uri()):
            console.print(f"rlsim report --open: no browser found here; open {out} yourself",
                          markup=False, highlight=False)
    if problems:
        raise typer.Exit(2)


def _check_in_browser(page: Path, screenshots: Path) -> None:
    """Open the report in headless Chromium: exit 2 without one, 1 on a script error or a plot
    not drawn."""
    from rlsim.report.browser import BrowserError, look

    try:
        seen = look(page, screenshots)
    except BrowserError as e:
        console.print(f"rlsim report --screenshots: {e}", style="red", markup=False,
                      highlight=False)
        raise typer.Exit(2) from None
    blank = [p["id"] for p in seen.plots if not p["drawn"]]
    for problem in seen.errors + [f"plot not drawn: {b}" for b in blank]:
        console.print(f"in Chromium: {problem}", style="red", markup=False, highlight=False)
    console.print(f"Chromium drew {len(seen.plots)} timeline(s) for {len(seen.sections)} "
                  f"scenario(s); {len(seen.screenshots)} screenshot(s) in {screenshots}",
                  markup=False, highlight=False)
    if seen.errors or blank:
        raise typer.Exit(1)
