"""The SkyPilot and dstack launchers ``rlsim launch skypilot|dstack`` write: one task YAML for
``--nodes`` nodes with ``--gpus-per-node`` GPUs of ``--accelerator``, every node running the
same script (:func:`rlsim.launch.model.rank_script`) over the platform's own variables:
SkyPilot's ``SKYPILOT_NODE_RANK``, ``SKYPILOT_NODE_IPS`` (one per line, the head first),
``SKYPILOT_NUM_GPUS_PER_NODE``, ``SKYPILOT_TASK_ID``; dstack's ``DSTACK_NODE_RANK``,
``DSTACK_MASTER_NODE_IP``, ``DSTACK_NODES_IPS``, ``DSTACK_GPUS_PER_NODE``, ``DSTACK_RUN_NAME``.

Each is validated against the JSON schema of its own task model (rlsim/launch/schemas, written
from the installed packages by ci/extract_task_schemas.py).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import yaml

from rlsim.launch.model import Launch, rank_script, schema_problems

SCHEMAS = Path(__file__).parent / "schemas"


def skypilot(launch: Launch) -> dict:
    ip_of = 'echo "$SKYPILOT_NODE_IPS" | sed -n "{}p"'
    task = {
        "name": "rlsim-acceptance",
        "num_nodes": launch.nodes,
        "resources": {"accelerators": f"{launch.accelerator}:{launch.gpus_per_node}"},
        "run": rank_script(launch, "$SKYPILOT_NODE_RANK", "$(" + ip_of.format(1) + ")",
                           "$(" + ip_of.format("$((SKYPILOT_NODE_RANK + 1))") + ")",
                           "$SKYPILOT_NUM_GPUS_PER_NODE", "$SKYPILOT_TASK_ID"),
    }
    if launch.image:
        task["resources"]["image_id"] = f"docker:{launch.image}"
    return task


def dstack(launch: Launch) -> dict:
    task = {
        "type": "task",
        "name": "rlsim-acceptance",
        "nodes": launch.nodes,
        "commands": [rank_script(
            launch, "$DSTACK_NODE_RANK", "$DSTACK_MASTER_NODE_IP",
            '$(echo "$DSTACK_NODES_IPS" | sed -n "$((DSTACK_NODE_RANK + 1))p")',
            "$DSTACK_GPUS_PER_NODE", "$DSTACK_RUN_NAME")],
        "resources": {"gpu": f"{launch.accelerator}:{launch.gpus_per_node}"},
        "max_duration": f"{launch.seconds}s",  # --time: dstack stops the run after it
    }
    if launch.image:
        task["image"] = launch.image
    return task


def schema(platform: str) -> dict:
    return json.loads(gzip.decompress((SCHEMAS / f"{platform}-task.json.gz").read_bytes()))


def problems(platform: str, doc: dict) -> list[str]:
    """Where ``doc`` breaks ``platform``'s own task schema (empty: valid)."""
    return schema_problems(schema(platform)["schema"], doc)


def _render(platform: str, doc: dict, launch: Launch, name: str, start: str) -> str:
    if bad := problems(platform, doc):
        raise ValueError(f"the task breaks {platform}'s schema: " + "; ".join(bad[:3]))
    s = schema(platform)
    return (f"# Written by `rlsim launch {platform}`: {launch.nodes} node(s) x "
            f"{launch.gpus_per_node} {launch.accelerator}; start it with: {start} {name}\n"
            f"# Valid against {s['model']} of {s['package']}. The report is written on the "
            f"head under {launch.report_dir}: mount shared storage there to keep it.\n"
            + dump(doc))


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the scripts) as literal blocks, readable in the file."""


_Dumper.add_representer(str, lambda d, s: d.represent_scalar(
    "tag:yaml.org,2002:str", s, style="|" if "\n" in s else None))


def dump(doc: dict) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=100)


def skypilot_script(launch: Launch, name: str) -> str:
    return _render("skypilot", skypilot(launch), launch, name, "sky launch")


def dstack_script(launch: Launch, name: str) -> str:
    return _render("dstack", dstack(launch), launch, name, "dstack apply -f")
