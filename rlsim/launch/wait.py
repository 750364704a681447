"""Wait, bounded, until a Ray cluster has its nodes: ``python -m rlsim.launch.wait --address
HOST:PORT --nodes N --gpus-per-node G --timeout S``. Reads ``ray.nodes()`` (never ``ray status |
grep``): exit 0 once N alive nodes each have at least G GPUs; exit 1 after S seconds, printing
the nodes seen; exit 2 for bad arguments, or at once for a cluster that refuses this process's
token. Used by the launchers ``rlsim launch`` writes."""

from __future__ import annotations

import argparse
import sys
import time


def ready(nodes: list[dict], want: int, gpus: int) -> tuple[bool, str]:
    """Whether ``nodes`` (``ray.nodes()``) hold ``want`` alive nodes of ``gpus`` GPUs, and the
    line saying what is there."""
    alive = [n for n in nodes if n.get("Alive")]
    fit = [n for n in alive if n.get("Resources", {}).get("GPU", 0) >= gpus]
    seen = ", ".join(f"{n['NodeManagerAddress']} ({n.get('Resources', {}).get('GPU', 0):g} GPUs)"
                     for n in alive) or "none"
    return len(fit) >= want, (f"{len(fit)}/{want} nodes alive with at least {gpus} GPUs "
                              f"(alive: {seen})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rlsim.launch.wait")
    ap.add_argument("--address", required=True)
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--gpus-per-node", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args(argv)
    from rlsim.ray_internals.gcs import no_answer as gcs_no_answer
    from rlsim.ray_internals.gcs import refusal as gcs_refusal
    from rlsim.reach import parse_address

    try:
        host, port = parse_address(args.address)
    except ValueError as e:
        print(f"rlsim wait: {e}", file=sys.stderr)
        return 2
    import ray

    deadline, last = time.monotonic() + args.timeout, ""
    while True:
        # ask the GCS first (a greeting, then one request): Ray's own connect to a head not up
        # yet, or to one that greets and answers nothing, waits for minutes
        silence = None if ray.is_initialized() else gcs_no_answer(host, port, 2.0)
        if silence:
            ok, line = False, f"no Ray head answers at {args.address} yet ({silence})"
        elif not ray.is_initialized() and (refusal := gcs_refusal(host, port, 2.0)):
            from rlsim.backends.real import refusal_line

            print(f"rlsim wait: {refusal_line(args.address, refusal)}", file=sys.stderr)
            return 2  # waiting does not change a token
        else:
            if not ray.is_initialized():
                ray.init(address=args.address, logging_level="ERROR", log_to_driver=False)
            ok, line = ready(ray.nodes(), args.nodes, args.gpus_per_node)
        if line != last:
            print(f"rlsim wait: {line}", flush=True)
            last = line
        if ok:
            return 0
        if time.monotonic() > deadline:
            print(f"rlsim wait: gave up after {args.timeout:g} s: {line}. Fix: check the "
                  "workers' `ray start` output in the job log, or raise the launcher's wait",
                  file=sys.stderr, flush=True)
            return 1
        time.sleep(2)


if __name__ == "__main__":
    sys.exit(main())
