"""Checks: judge a finished scenario from its history alone (Jepsen's checker), never during it.

The run against its fault-free twin (same config and seed, same cluster, trained first): every
step's metrics, and the final weights, read from the HF export's safetensors file without torch.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from pathlib import Path

from pydantic import Field

from rlsim.checks.base import _true, _twin, check
from rlsim.fields import Strict
from rlsim.files import Damaged, read_file, read_json_lines, shown, why_not_read
from rlsim.history import MAX_HISTORY, Outcome
from rlsim.result import Verdict


def _metrics(run_dir: Path, twin: bool = False) -> tuple[dict[int, dict], str]:
    """Each step's row of ``run_dir``'s ``metrics.jsonl`` (``perf/`` and ``attempt`` fields left
    out; a step logged again after a restart, as last logged) and a note for the verdict. A last
    line cut short is what a killed run leaves: it is left out and the note says so; in the
    twin's record (``twin``) it is damage. Raises Damaged naming the file, the row and the fix
    for a row that is not an object with an integer ``step``, or a file not read as rlsim reads
    records (a link, a FIFO, over :data:`MAX_HISTORY`)."""
    path = run_dir / "metrics.jsonl"
    fix = ("train the twin again (`--fresh-twin`)" if twin else
           "the trainer writes one JSON object per line, with its integer step")
    try:
        values, torn = read_json_lines(path, MAX_HISTORY)
    except FileNotFoundError:
        return {}, ""
    except (OSError, Damaged) as e:
        raise Damaged(f"{e}: {fix}") from None
    if torn and twin:
        raise Damaged(f"{shown(path)}: its last line is cut short: {fix}")
    rows = {}
    for n, row in enumerate(values, 1):
        if not isinstance(row, dict) or type(row.get("step")) is not int:
            raise Damaged(f"{shown(path)}: row {n} is not a metrics row (a JSON object with an "
                          f"integer step): {fix}")
        rows[row["step"]] = {k: v for k, v in row.items() if not k.startswith(("perf/", "attempt"))}
    return rows, (f"; the last line of the run's {path.name} was cut short (a run killed "
                  "mid-write leaves it so) and is left out" if torn else "")


class MatchesBaseline(Strict):
    weights: bool = Field(True, description="also compare the final weights")
    rtol: float = Field(0.0, ge=0, description="relative tolerance per metric and weight "
                        "(0: exact, the reference trainer's promise)")
    atol: float = Field(0.0, ge=0, description="absolute tolerance per metric and weight")


@check(MatchesBaseline, _true, needs=("metrics.jsonl",), twin=True)
def matches_baseline(o: Outcome, p) -> Verdict:
    """Every step's metrics (and the final weights) equal the fault-free twin's: bit for bit by
    default; within ``|run - twin| <= atol + rtol * |twin|`` for trainers whose numbers are not
    bit-exact (non-deterministic kernels, another reduction order after a rebuild)."""
    if o.baseline_dir is None:
        return Verdict("matches_baseline", False, "the baseline twin did not run")
    try:
        a, torn = _metrics(o.run_dir)
        b, _ = _metrics(o.baseline_dir, twin=True)
    except Damaged as e:
        return Verdict("matches_baseline", False, str(e) + _twin(o))
    if not b:
        return Verdict("matches_baseline", False, "the baseline twin logged no metrics")
    differ = [s for s in sorted(set(a) | set(b)) if not _close_rows(a.get(s), b.get(s), p)]
    tol = f"rtol={p.rtol:g}, atol={p.atol:g}" if p.rtol or p.atol else ""
    if differ:
        s = differ[0]
        return Verdict("matches_baseline", False, f"metrics differ from the fault-free twin from "
                       f"step {s} on ({len(differ)} steps): run {a.get(s)} vs twin {b.get(s)}"
                       + (f" ({tol})" if tol else "") + torn + _twin(o))
    msg = f"all {len(a)} steps' metrics {f'are within {tol} of' if tol else 'equal'} the " \
        "fault-free twin's"
    if p.weights:
        same, what = _same_weights(o.run_dir, o.baseline_dir, max(a), p.rtol, p.atol)
        if not same:
            return Verdict("matches_baseline", False, what + torn + _twin(o))
        msg += "; " + what
    return Verdict("matches_baseline", True, msg + torn + _twin(o))


def _close_rows(run: dict | None, twin: dict | None, p) -> bool:
    """One step's metrics: the same names, each value equal (or, for numbers, within the
    tolerance)."""
    if run is None or twin is None or run.keys() != twin.keys():
        return run == twin
    return all(_close(run[k], twin[k], p.rtol, p.atol) for k in run)


def _close(x, y, rtol: float, atol: float) -> bool:
    numbers = (int, float)
    if not (rtol or atol) or not (isinstance(x, numbers) and isinstance(y, numbers)):
        return x == y
    return math.isfinite(x) and math.isfinite(y) and abs(x - y) <= atol + rtol * abs(y)


def _same_weights(run: Path, twin: Path, step: int, rtol: float = 0.0,
                  atol: float = 0.0) -> tuple[bool, str]:
    """Whether the final exports at ``step`` hold the same tensors, all of them, each equal (or
    within the tolerances), and the sentence that says so. A tensor missing from either side,
    or empty on either (an emptied export holds no weights to compare), fails naming it, as
    does an export that is missing or cannot be read."""
    rel = Path("checkpoints") / f"global_step_{step}" / "hf" / "model.safetensors"
    with contextlib.suppress(OSError):  # a link is followed: never to the twin's own file
        if os.path.samefile(run / rel, twin / rel):
            return False, (f"the run's final HF export ({rel}) is the twin's own file: there is "
                           "nothing of the run's to compare")
    exports = {}
    for side, root in (("run", run), ("twin", twin)):
        try:
            exports[side] = _safetensors(root / rel)
        except FileNotFoundError:
            return False, (f"no final HF export at step {step} to compare ({rel}: the {side} "
                           "has none)")
        except ValueError as e:
            return False, str(e)
        if not exports[side]:
            return False, f"the {side}'s final HF export at step {step} holds no tensors ({rel})"
    x, y = exports["run"], exports["twin"]
    bad = [(k, why) for k in sorted(set(x) | set(y))
           if (why := _tensor_problem(x.get(k), y.get(k), rtol, atol))]
    same = "bit-identical" if not (rtol or atol) else f"within rtol={rtol:g}, atol={atol:g}"
    if not bad:
        return True, f"final weights {same} ({len(x)} tensors)"
    name, why = bad[0]
    return False, (f"final weights differ in {len(bad)} tensors (first: {shown(name)[:80]}"
                   + ("" if why == "differs" else f", {why}") + ")")


def _tensor_problem(a: tuple | None, b: tuple | None, rtol: float, atol: float) -> str | None:
    """What is wrong with one tensor of the run's export (``a``) against the twin's (``b``),
    as :func:`_safetensors` reads them (None: absent); None when they agree."""
    for t, side in ((a, "run"), (b, "twin")):
        if t is None:
            return f"missing from the {side}'s export"
        if not t[2]:
            return f"empty in the {side}'s export"
    same = a == b if not (rtol or atol) else _tensors_close(a, b, rtol, atol)
    return None if same else "differs"


# -- the final export, read without torch ----------------------------------------------------------
# safetensors' dtypes as numpy reads them (BF16: the high half of a float32)
_NUMPY_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
                 "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?", "BF16": "<u2"}


def _safetensors(path: Path) -> dict[str, tuple[str, tuple[int, ...], bytes]]:
    """Each tensor of a safetensors file: its dtype, shape and bytes, read from the format's
    8-byte header length and JSON header (no torch: importing it cost `rlsim run` 1.3 s).
    FileNotFoundError when there is none; ValueError naming the file for one that is not read
    (a FIFO, over :data:`MAX_WEIGHTS`) or whose header does not describe its bytes (offsets
    outside the data, a size that is not the shape's). A link is followed: the export is the
    trainer's own, and frameworks link weights from a cache."""
    try:
        data = read_file(path, MAX_WEIGHTS, follow=True)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise ValueError(f"{e}: the weights cannot be compared") from None
    size = int.from_bytes(data[:8], "little") if len(data) >= 8 else -1
    try:
        if not 0 < size <= len(data) - 8:
            raise ValueError("no header")
        header = json.loads(data[8:8 + size])
        body = data[8 + size:]
        return {name: _tensor(t, body) for name, t in header.items() if name != "__metadata__"}
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError) as e:
        raise ValueError(f"{shown(path)} is not a safetensors file ({why_not_read(e)}): the "
                         "weights cannot be compared") from None


MAX_WEIGHTS = 1 << 30  # a final export read whole (as the twins' store keeps it)
_ITEM_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
               "U8": 1, "BOOL": 1}


def _tensor(t: dict, body: bytes) -> tuple[str, tuple[int, ...], bytes]:
    """One entry of a safetensors header as its dtype, shape and bytes; ValueError where the
    entry does not describe bytes of ``body`` (a sliced past end is no tensor of the file)."""
    dtype, shape, (begin, end) = t["dtype"], tuple(t["shape"]), t["data_offsets"]
    if not (isinstance(dtype, str) and all(type(n) is int and n >= 0 for n in shape)
            and type(begin) is int and type(end) is int and 0 <= begin <= end <= len(body)):
        raise ValueError(f"a tensor's entry {str(t)[:80]} does not fit the file")
    if dtype in _ITEM_BYTES and end - begin != math.prod(shape) * _ITEM_BYTES[dtype]:
        raise ValueError(f"a tensor of shape {list(shape)} {dtype} holds {end - begin} bytes")
    return dtype, shape, body[begin:end]


def _tensors_close(a: tuple, b: tuple, rtol: float, atol: float) -> bool:
    """Whether two tensors (:func:`_safetensors`) agree within the tolerances, as
    ``torch.allclose``: same dtype and shape, |a - b| <= atol + rtol * |b| everywhere, NaN
    never close."""
    import numpy as np

    if a[:2] != b[:2] or a[0] not in _NUMPY_DTYPES:
        return a == b

    def values(t):
        v = np.frombuffer(t[2], dtype=_NUMPY_DTYPES[t[0]])
        if t[0] == "BF16":
            v = (v.astype(np.uint32) << 16).view(np.float32)
        return v.astype(np.float64)
    return bool(np.allclose(values(a), values(b), rtol=rtol, atol=atol, equal_nan=False))
