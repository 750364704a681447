"""Blame accuracy and goodput over a small fault matrix, per recovery strategy.

    .venv/bin/python bench/blame_matrix.py [--quick] [--torchft] [--out DIR]

Each cell is one scenario of the reference trainer (GRPO, disaggregated: the actor and the
rollout each on a GPU node of their own, a third GPU node spare for a rebuild after a node kill,
the head holding no GPU, so a node kill never takes the head): a fault type
(``kill_role``, ``hang_role``, ``kill_node``) aimed at a role's rank 0 (actor or rollout) at a
step (3 or 5), under a recovery strategy: restart from the newest checkpoint, saved every 2 or
every 4 steps. ``--torchft`` adds in-place replacement (torchft under Ray Train, the catalogue's
``ray_train_replica_replaced``; Ray 2.57 or later and torchft installed).

Per cell: whether the run completed, whether the trainer's own words named what the fault hit
(the ``blamed`` check: its node's address, its process or the role's rank), and goodput (the
effective training time ratio, :mod:`rlsim.goodput`: the time of the steps kept over the wall,
and the wall against the fault-free twin's). The tables: each cell, then per strategy and per
fault type: cells, blame accuracy (blamed / cells), mean goodput, mean time lost per fault
against the twin. ``--quick``: kill_role and hang_role at step 3 only (8 cells, about 3 min on
2 cores). Nothing here is asserted: the figures are for the issue notes and the docs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FAULTS = ("kill_role", "hang_role", "kill_node")
ROLES = ("actor", "rollout")
STEPS = (3, 5)
SAVES = (2, 4)


def cell(fault: str, role: str, step: int, save: int) -> dict:
    """One scenario of the matrix, as its YAML would say it."""
    return {
        "name": f"{fault}_{role}_s{step}_every{save}",
        "cluster": {"nodes": 4, "gpus_per_node": 1, "node": {0: {"gpus": 0}}},
        "trainer": {"config": "grpo_tiny", "overrides": {
            "save_freq": save, "total_steps": 8,
            "fault_tolerance": {"step_timeout_s": 5, "max_restarts": 2},
            "rollout": {"sync_timeout_s": 5},
            "placement": {"nnodes": 2, "gpus_per_node": 1, "mode": "disaggregated",
                          "roles": {"actor": "0-0", "ref": "0-0", "reward": "0-0",
                                    "rollout": "1-1"}}}},
        "faults": [{"at": {"step": step}, fault: {"role": role, "rank": 0}}],
        "expect": [{"completes": True}, {"blamed": {"fault": 0}}, {"matches_baseline": True}],
    }


def play_cell(spec: dict, folder: Path, session) -> dict:
    from rlsim.scenario.loader import load

    path = folder / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    t0 = time.monotonic()
    result = session.play(load(path), folder / spec["name"])
    verdicts = {v.check: v for v in result.checks}
    g = result.goodput or {}
    return {"name": spec["name"], "completed": verdicts["completes"].ok,
            "blamed": verdicts["blamed"].ok, "blame": verdicts["blamed"].message,
            "goodput": g.get("goodput"), "lost_per_fault_s": g.get("lost_per_fault_s"),
            "seconds": round(time.monotonic() - t0, 1)}


def torchft_cell(folder: Path, session) -> dict | None:
    """The catalogue's torchft story with blame and goodput judged; None where it cannot run."""
    from rlsim.backends.base import Unsupported
    from rlsim.scenario.loader import load

    text = (ROOT / "scenarios" / "ray_train_replica_replaced.yaml").read_text()
    spec = yaml.safe_load(text)
    spec["name"] = "torchft_in_place"
    spec["expect"] = spec["expect"] + [{"blamed": {"fault": 0}}]
    (folder / "trainers").mkdir(exist_ok=True)
    for f in (ROOT / "scenarios" / "trainers").glob("*.py"):
        (folder / "trainers" / f.name).write_text(f.read_text())
    path = folder / "torchft.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    try:
        result = session.play(load(path), folder / "torchft")
    except Unsupported as e:
        print(f"torchft: not run here ({e})", file=sys.stderr)
        return None
    verdicts = {v.check: v for v in result.checks}
    g = result.goodput or {}
    return {"name": "torchft_in_place", "completed": verdicts["completes"].ok,
            "blamed": verdicts["blamed"].ok, "blame": verdicts["blamed"].message,
            "goodput": g.get("goodput"), "lost_per_fault_s": g.get("lost_per_fault_s"),
            "seconds": round(result.seconds, 1)}


def _mean(values: list) -> str:
    got = [v for v in values if isinstance(v, int | float)]
    return f"{statistics.fmean(got):.2f}" if got else "-"


def summary(title: str, rows: list[dict], key) -> Table:
    t = Table(title=title)
    for head in ("group", "cells", "completed", "blame accuracy", "mean goodput",
                 "mean lost per fault (s)"):
        t.add_column(head)
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r)
    for name, rs in groups.items():
        t.add_row(name, str(len(rs)), f"{sum(r['completed'] for r in rs)}/{len(rs)}",
                  f"{sum(r['blamed'] for r in rs) / len(rs):.2f}",
                  _mean([r["goodput"] for r in rs]), _mean([r["lost_per_fault_s"] for r in rs]))
    return t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--torchft", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    from rlsim.scenario.session import Session

    folder = args.out or Path(tempfile.mkdtemp(prefix="blame-matrix-"))
    folder.mkdir(parents=True, exist_ok=True)
    faults, steps = (FAULTS[:2], STEPS[:1]) if args.quick else (FAULTS, STEPS)
    session = Session()
    rows = []
    try:
        for save in SAVES:
            for fault in faults:
                for role in ROLES:
                    for step in steps:
                        rows.append(play_cell(cell(fault, role, step, save), folder, session))
                        print(rows[-1], file=sys.stderr, flush=True)
        if args.torchft and (got := torchft_cell(folder, session)) is not None:
            rows.append(got)
    finally:
        session.close()
    console = Console(width=140)
    cells = Table(title=f"fault matrix ({folder})")
    for head in ("cell", "completed", "blamed", "goodput", "lost per fault (s)", "took (s)"):
        cells.add_column(head)
    for r in rows:
        cells.add_row(r["name"], str(r["completed"]), str(r["blamed"]),
                      "-" if r["goodput"] is None else f"{r['goodput']:.2f}",
                      "-" if r["lost_per_fault_s"] is None else f"{r['lost_per_fault_s']:.1f}",
                      str(r["seconds"]))
    console.print(cells)

    def strategy(r: dict) -> str:
        return "torchft in place" if r["name"].startswith("torchft") else \
            f"restart, save every {r['name'].rsplit('every', 1)[1]}"

    console.print(summary("per recovery strategy", rows, strategy))
    console.print(summary("per fault type", [r for r in rows if not r["name"].startswith(
        "torchft")], lambda r: r["name"].rsplit("_", 3)[0]))
    missed = [r for r in rows if not r["blamed"]]
    for r in missed:
        console.print(f"not blamed: {r['name']}: {r['blame']}", markup=False, highlight=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
