"""The JSON Schema of a scenario file, generated from the models that read it: the scenario's
sections, every fault's parameters and every check's (built-in and plugins', from their entry
points), so that an editor completes keys and flags mistakes as the file is typed.

What the schema says is the shape: keys, types, ranges, one fault per entry, one check per
``expect`` entry with its scalar shorthand. What needs the cluster or the trainer (a node index
beyond the cluster, a step past the run's end, a rank the trainer lacks) only ``rlsim validate``
knows; the schema is the editor's half of it.

``rlsim schema`` prints it; ``rlsim init`` writes it into the user's project as
``.rlsim/scenario.schema.json`` and points the scenarios it writes at it (the
``yaml-language-server`` comment that VS Code's YAML extension and other LSP editors read).
``scenario.schema.json`` beside this module is the built-ins' schema as shipped (a test keeps it
equal to what this module generates).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from pydantic.json_schema import models_json_schema

SHIPPED = Path(__file__).with_name("scenario.schema.json")
DRAFT = "https://json-schema.org/draft/2020-12/schema"


def _scalar(check) -> dict | None:
    """The JSON Schema of a check's scalar shorthand, from the function that reads it."""
    if check.scalar is None:
        return None
    name = check.scalar.__qualname__.split(".")[0]
    return {"_true": {"const": True}, "_count": {"type": "integer", "minimum": 0},
            "_seconds": {"type": "number", "exclusiveMinimum": 0},
            "_ratio": {"type": "number", "exclusiveMinimum": 0},
            "_text": {"type": "string"}}.get(name, {})


def _summary(cls) -> str:
    doc = (cls.__doc__ or cls.__module__ and __import__(cls.__module__, fromlist=["x"]).__doc__
           or "").strip()
    return " ".join(doc.split("\n\n")[0].split())


def scenario_schema() -> dict[str, Any]:
    """The schema of a scenario file with the faults and checks installed here."""
    from rlsim.checks import CHECKS
    from rlsim.faults import FAULTS
    from rlsim.scenario.schema import FaultEntry, Scenario

    faults, checks = dict(sorted(FAULTS.items())), dict(sorted(CHECKS.items()))
    models = [(Scenario, "validation"), (FaultEntry, "validation"),
              *[(f.Params, "validation") for f in faults.values()],
              *[(c.Params, "validation") for c in checks.values()]]
    refs, top = models_json_schema(models, ref_template="#/$defs/{model}")
    defs = top["$defs"]

    def ref(model) -> dict:
        return dict(refs[(model, "validation")])

    def deref(model) -> dict:
        return copy.deepcopy(defs[ref(model)["$ref"].rsplit("/", 1)[1]])

    root = deref(Scenario)
    entry = deref(FaultEntry)
    for name, fault in faults.items():
        entry["properties"][name] = {"anyOf": [ref(fault.Params), {"type": "null"}],
                                     "description": _summary(fault)}
    entry["additionalProperties"] = False
    entry["required"] = ["at"]
    entry["oneOf"] = [{"required": [name]} for name in faults]
    root["properties"]["faults"]["items"] = entry
    one_check = []
    for name, check in checks.items():
        forms = [ref(check.Params), {"type": "null"}]
        if (scalar := _scalar(check)) is not None:
            forms.append(scalar)
        one_check.append({"type": "object", "properties": {name: {
            "anyOf": forms, "description": _summary(check.judge)}},
            "required": [name], "additionalProperties": False})
    root["properties"]["expect"]["items"] = {"oneOf": one_check}
    for model in (Scenario, FaultEntry):
        defs.pop(ref(model)["$ref"].rsplit("/", 1)[1])
    return {**root, "$schema": DRAFT, "title": TITLE,
            "description": "A scenario file of rlsim: a cluster, a trainer, faults on a schedule "
                           "and the expectations judged after the run.",
            "$defs": defs}


TITLE = "rlsim scenario"  # what names a file as rlsim's schema (rlsim init replaces only its own)


def text(schema: dict[str, Any] | None = None) -> str:
    """The schema as written to a file: sorted keys, two-space indent, a final newline."""
    return json.dumps(scenario_schema() if schema is None else schema, indent=2,
                      sort_keys=True) + "\n"
