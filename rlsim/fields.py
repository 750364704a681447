"""The base of every parameter model a scenario file fills in (a fault's, a check's, a section's):
strict pydantic, unknown keys and non-finite numbers refused, and the shared field types."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict

NodeRef = int | Literal["random"]
DAY = 86400.0  # no fault, wait or run in a scenario lasts longer
PORT_NAMES = re.compile(r"^(gcs|dashboard|client|(workers|daemons):(\d{1,2}))$")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def regex(pattern: str) -> str:
    """A field validator: ``pattern`` compiles as a Python regular expression."""
    try:
        re.compile(pattern)
    except re.error as e:
        raise ValueError(f"not a valid regular expression ({e}); escape special characters "
                         "with a backslash") from None
    return pattern


def first_error(e) -> str:
    """A pydantic ValidationError as ``field: what is wrong`` (its first problem)."""
    err = e.errors()[0]
    field = ".".join(str(x) for x in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    return f"{field}: {msg}" if field else msg
