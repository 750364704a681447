"""A Ray tasks-and-actors workload that must survive nodes dying under it, in the spirit of Ray's
own chaos release test: a plain Ray program (Ray's public API alone; it imports nothing of rlsim
and writes no rlsim events), driven with ``adapter: plain``.

Waves of work, each spread over the cluster's nodes:

- nested tasks: PARENTS parent tasks, each running CHILDREN leaf tasks and returning their
  results; both retried without limit (``max_retries=-1``), as Ray retries a task whose worker
  or node died;
- actor calls: one call per wave to each of its actors, one placed on every node (softly: a
  restarted one may go elsewhere), which Ray restarts without limit (``max_restarts=-1``,
  ``max_task_retries=-1``).

After the first wave it prints ``chaos: tasks running`` (a scenario waits for that line, not for
a time), and it goes on for RUN_S more seconds of waves. Then it judges itself, and exits 1
naming what failed:

- at-least-once delivery: every task's and every call's result arrived, with its value, within
  WAIT_S seconds; the missing or wrong ones are named (wave, parent, child);
- resources returned: once its actors are killed, the cluster's available CPUs equal its total
  within WAIT_S seconds (a node that died with work on it holds nothing afterwards).

    python scenarios/trainers/ray_tasks_chaos.py   (RAY_ADDRESS set; PARENTS, CHILDREN, TASK_S,
                                                    RUN_S, WAIT_S from the environment)
"""

from __future__ import annotations

import os
import sys
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


def setting(name: str, default: str) -> float:
    return float(os.environ.get(name, default))


@ray.remote(num_cpus=1, max_retries=-1)
def leaf(wave: int, parent: int, child: int, task_s: float) -> int:
    time.sleep(task_s)
    return value(wave, parent, child)


@ray.remote(num_cpus=1, max_retries=-1, scheduling_strategy="SPREAD")
def parent_task(wave: int, parent: int, children: int, task_s: float) -> list[int]:
    # nested: a parent that dies with its node takes its children's results with it, and its
    # retry submits them again
    return ray.get([leaf.options(scheduling_strategy="SPREAD").remote(wave, parent, c, task_s)
                    for c in range(children)])


@ray.remote(num_cpus=1, max_restarts=-1, max_task_retries=-1)
class Echo:
    """A stateless actor: a call retried on its restarted instance gives the same answer."""

    def call(self, wave: int, actor: int) -> int:
        return value(wave, -1, actor)


def value(wave: int, parent: int, child: int) -> int:
    """What a task must return: unique per task, so a wrong or crossed result is seen."""
    return wave * 1_000_000 + (parent + 1) * 1_000 + child


def submit(wave: int, parents: int, children: int, task_s: float, actors: list) -> dict:
    """One wave: (what, expected) -> its ObjectRef."""
    refs = {(f"wave {wave} parent {p}", tuple(value(wave, p, c) for c in range(children))):
            parent_task.remote(wave, p, children, task_s) for p in range(parents)}
    refs.update({(f"wave {wave} actor {a}", value(wave, -1, a)): actor.call.remote(wave, a)
                 for a, actor in enumerate(actors)})
    return refs


def lost(refs: dict, wait_s: float) -> list[str]:
    """The tasks whose result did not arrive within ``wait_s``, or arrived wrong."""
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=wait_s)
    done, out = set(ready), []
    for (what, expected), ref in refs.items():
        if ref not in done:
            out.append(f"{what}: no result in {wait_s:g} s")
            continue
        try:
            got = ray.get(ref, timeout=1)
        except Exception as e:  # noqa: BLE001 - a lost task is named, whatever Ray raised
            out.append(f"{what}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            continue
        if (tuple(got) if isinstance(got, list) else got) != expected:
            out.append(f"{what}: returned {got!r}, expected {expected!r}")
    return out


def cpus_returned(wait_s: float) -> tuple[bool, float, float]:
    """Whether the available CPUs came back to the cluster's total within ``wait_s`` (polled
    every half second); the last (available, total) seen."""
    deadline = time.monotonic() + wait_s
    while True:
        free = ray.available_resources().get("CPU", 0.0)
        total = ray.cluster_resources().get("CPU", 0.0)
        if free == total or time.monotonic() > deadline:
            return free == total, free, total
        time.sleep(0.5)


def main() -> int:
    parents, children = int(setting("PARENTS", "4")), int(setting("CHILDREN", "3"))
    task_s, run_s = setting("TASK_S", "0.2"), setting("RUN_S", "10")
    wait_s = setting("WAIT_S", "60")
    ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), logging_level="ERROR")
    actors = [Echo.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        node["NodeID"], soft=True)).remote() for node in ray.nodes() if node["Alive"]]
    refs = submit(0, parents, children, task_s, actors)
    if missing := lost(refs, wait_s):  # nothing has failed yet: the cluster cannot run the work
        print(f"chaos: the first wave did not complete: {'; '.join(missing[:5])}", flush=True)
        return 1
    print(f"chaos: tasks running ({len(refs)} per wave)", flush=True)
    wave, until = 0, time.monotonic() + run_s
    while time.monotonic() < until:
        wave += 1
        refs.update(submit(wave, parents, children, task_s, actors))
        ray.wait(list(refs.values())[-len(actors) - parents:], num_returns=parents + len(actors),
                 timeout=task_s * (children + 2))  # a wave at a time, without waiting out a loss
    missing = lost(refs, wait_s)
    print(f"chaos: {wave + 1} waves, {len(refs)} tasks and calls, {len(missing)} lost",
          flush=True)
    for actor in actors:
        ray.kill(actor)
    returned, free, total = cpus_returned(wait_s)
    if missing:
        print("chaos: at-least-once delivery failed: " + "; ".join(missing[:10]), flush=True)
    if not returned:
        print(f"chaos: resources not returned: {free:g} of {total:g} CPUs available after "
              f"{wait_s:g} s", flush=True)
    if missing or not returned:
        return 1
    print(f"chaos: every result arrived; {total:g} of {total:g} CPUs available", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
