"""Write the JSON schemas of SkyPilot's and dstack's own task models, with the package versions
they came from, as gzipped JSON: what `rlsim launch skypilot|dstack` output is validated against
(rlsim/launch/schemas). Run it in a throwaway virtualenv holding both packages (no cloud account
is needed to import their models):

    python -m venv /tmp/tv && /tmp/tv/bin/pip install skypilot==0.14.1 dstack==0.22.5
    /tmp/tv/bin/python ci/extract_task_schemas.py rlsim/launch/schemas
"""
import gzip
import importlib.metadata as md
import json
import sys
from pathlib import Path


def write(out: Path, name: str, package: str, model: str, schema: dict) -> None:
    doc = {"package": f"{package} {md.version(package)}", "model": model, "schema": schema}
    (out / f"{name}-task.json.gz").write_bytes(
        gzip.compress(json.dumps(doc, separators=(",", ":"), sort_keys=True).encode(), 9))


def main(out: Path) -> None:
    from sky.utils import schemas

    write(out, "skypilot", "skypilot", "sky.utils.schemas.get_task_schema()",
          schemas.get_task_schema())
    from dstack._internal.core.models.configurations import TaskConfiguration

    schema = (TaskConfiguration.model_json_schema() if hasattr(TaskConfiguration,
                                                               "model_json_schema")
              else TaskConfiguration.schema())
    write(out, "dstack", "dstack",
          "dstack._internal.core.models.configurations.TaskConfiguration (its JSON schema)",
          schema)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
