"""Python's start-up hook on a device stand-in node (rlsim.standin): this folder is first on the
node's PYTHONPATH. It arms the stand-in, then runs the sitecustomize this one hides, if any."""

import os
import sys


def _arm() -> None:
    try:
        from rlsim.standin import activate
    except ImportError:  # a Python without rlsim (another venv): nothing to stand in from
        return
    activate()


def _next() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    saved, mine = sys.path[:], sys.modules.pop("sitecustomize", None)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        import sitecustomize  # noqa: F401 - the hidden one runs as it is imported
    except ModuleNotFoundError as e:
        if e.name != "sitecustomize":  # the hidden one failed: said as Python says it
            print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(e).__name__}: "
                  f"{e}", file=sys.stderr)
        if mine is not None:
            sys.modules["sitecustomize"] = mine
    except Exception as e:  # noqa: BLE001 - as site.py reports a failing sitecustomize
        print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(e).__name__}: {e}",
              file=sys.stderr)
    finally:
        sys.path[:] = saved


_arm()
_next()
