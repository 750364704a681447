"""What a framework's launch asks Ray for, and whether a cluster can give it: pure data, no Ray.

A reader (:mod:`rlsim.plan.openrlhf`, ``verl``, ``roll``, ``rlinf``) turns a launch command or
config into a :class:`Layout`: the groups of GPUs the framework asks for at once, in the order it
asks (a Ray placement group of bundles and a strategy, or GPUs it pins by global index), who sits
on each GPU, and what the framework itself would refuse before placing anything.
:func:`place` then lays the groups onto a cluster the way Ray would and says what does not fit.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field

# Ray's placement strategies, and NODE: GPUs a framework pins to one node by global index
# (ROLL's device_mapping, RLinf's component_placement): node = index // GPUs per node
STRATEGIES = ("PACK", "STRICT_PACK", "SPREAD", "STRICT_SPREAD", "NODE")


class PlanInputError(ValueError):
    """The launch command or config cannot be read (an unknown flag, a file that does not
    parse); the message names the flag, key or file and the fix."""


# The largest cluster rlsim plans, as `rlsim launch` starts: a launch asking more is refused
# before any list of that size is built (a typo of 99999999999 nodes would hang the reader)
MAX_NODES, MAX_GPUS_PER_NODE = 4096, 64
MAX_GPUS = MAX_NODES * MAX_GPUS_PER_NODE


def whole(value, key: str, least: int = 1, most: int = MAX_GPUS) -> int:
    """Launch setting ``key`` as a whole number within ``least..most``; PlanInputError naming
    the key and the fix for anything else (``0.5`` is not rounded to 0, ``auto`` and ``.inf`` are
    no sizes, a bool is not a number)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise PlanInputError(f"{key}={value}: not a whole number; fix: e.g. {key}=2")
    try:
        number = float(value) if not isinstance(value, int) else value
    except ValueError:
        raise PlanInputError(f"{key}={value}: not a whole number; fix: e.g. {key}=2") from None
    if not isinstance(number, int) and not (math.isfinite(number) and number.is_integer()):
        raise PlanInputError(f"{key}={value}: not a whole number; fix: e.g. {key}=2")
    return bounded(int(number), key, least, most)


def bounded(value: int, key: str, least: int, most: int) -> int:
    """``value`` of launch setting ``key`` if it is within ``least..most``; else PlanInputError
    naming the key, the bounds and the fix."""
    if value > most:
        raise PlanInputError(f"{key}={value}: more than the {most} rlsim plans; fix: give the "
                             "size the launch really asks for")
    if value < least:
        raise PlanInputError(f"{key}={value}: give {least} or more")
    return value


@dataclass(frozen=True)
class Concern:
    """One thing the framework or Ray would do with this launch: ``error`` (it fails or hangs),
    ``warning`` (it runs, worse than intended). ``fix`` names the flag or key to change."""

    level: str
    message: str
    fix: str = ""

    def line(self) -> str:
        return f"{self.level}: {self.message}" + (f" Fix: {self.fix}" if self.fix else "")


@dataclass
class Group:
    """GPUs a framework asks for at once. ``holders[i]`` are the workers on bundle ``i`` (one
    GPU each: roles colocated on a GPU share its bundle). ``ray_bundles`` is the placement group
    as the framework creates it, where that differs from one bundle per GPU (ROLL: one bundle of
    the whole node). ``node`` is set for strategy NODE; ``cpus`` is each bundle's CPU share."""

    name: str
    strategy: str
    holders: list[list[str]]
    sized_by: str
    cpus: float = 1.0
    node: int | None = None
    ray_bundles: list[dict[str, float]] | None = None
    # bundles that must share a node (a tensor-parallel engine): label -> bundle indices, and
    # how the framework takes it when they do not ("error": it refuses; "warning": it runs)
    together: dict[str, list[int]] = field(default_factory=dict)
    apart_is: str = "warning"
    # strategy NODE: the node's GPU indices the framework pins (RLinf uses only the ranks its
    # placement names); unset, the node's first len(holders) GPUs
    gpu_ids: list[int] | None = None

    def bundles(self) -> list[dict[str, float]]:
        """The placement group's bundles, as the framework passes them to Ray."""
        if self.ray_bundles is not None:
            return self.ray_bundles
        return [{"GPU": 1.0, "CPU": self.cpus} for _ in self.holders]

    @property
    def gpus(self) -> int:
        return len(self.holders)


@dataclass
class Layout:
    """A launch as its framework would run it: the groups in the order it creates them and what
    it would refuse up front (``findings``)."""

    framework: str
    version: str
    sources: list[str]
    groups: list[Group]
    findings: list[Concern] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # the framework's own checks of the cluster before it places anything (verl's up to v0.5.0):
    # each takes the nodes and says what it refuses
    prechecks: list = field(default_factory=list)


@dataclass
class NodeCapacity:
    """A node of the cluster judged against: its GPUs and CPUs (None: not known, not checked)."""

    gpus: int
    cpus: float | None = None


@dataclass
class Placement:
    """Where each group landed: ``slots[g]`` is a (node, GPU) per bundle of group ``g``, or None
    where Ray could not place the group."""

    layout: Layout
    nodes: list[NodeCapacity]
    slots: list[list[tuple[int, int]] | None]
    findings: list[Concern]

    @property
    def fits(self) -> bool:
        return not any(f.level == "error" for f in self.findings)

    @property
    def asked(self) -> int:
        return sum(g.gpus for g in self.layout.groups)

    @property
    def there(self) -> int:
        return sum(n.gpus for n in self.nodes)

    def gpu_map(self) -> dict[int, dict[int, list[str]]]:
        """node -> GPU -> the workers on it, every GPU of the cluster listed."""
        out = {i: {g: [] for g in range(n.gpus)} for i, n in enumerate(self.nodes)}
        for group, slots in zip(self.layout.groups, self.slots, strict=True):
            for holders, (node, gpu) in zip(group.holders, slots or [], strict=False):
                out[node][gpu].extend(holders)
        return out

    def to_json(self) -> dict:
        return {
            "framework": self.layout.framework, "version": self.layout.version,
            "sources": self.layout.sources, "fits": self.fits,
            "gpus_asked": self.asked, "gpus_there": self.there,
            "cluster": [{"gpus": n.gpus, "cpus": n.cpus} for n in self.nodes],
            "groups": [{"name": g.name, "strategy": g.strategy, "gpus": g.gpus,
                        "bundles": g.bundles(), "sized_by": g.sized_by,
                        "placed": [list(s) for s in slots] if slots is not None else None}
                       for g, slots in zip(self.layout.groups, self.slots, strict=True)],
            "map": {str(n): {str(g): w for g, w in gpus.items()}
                    for n, gpus in self.gpu_map().items()},
            "findings": [{"level": f.level, "message": f.message, "fix": f.fix}
                         for f in self.findings],
            "notes": self.layout.notes,
        }


def launch_argv(argv: list[str], entry: tuple[str, ...], example: str) -> list[str]:
    """The arguments after the framework's entry point in a launch command as typed, with or
    without ``ray job submit ... --`` before it. One argument holding a whole command or script
    (``"$(cat run.sh)"``) is read as the shell reads the logical line that runs the entry
    point, with the script's variables and arrays expanded (:mod:`rlsim.plan.shell`), quoted
    ``bash -c "..."`` bodies included; ``$@`` is dropped."""
    if len(argv) == 1 and any(c in argv[0] for c in " \n"):
        from rlsim.plan.shell import launch_line

        line = launch_line(argv[0], entry)
        try:
            argv = shlex.split(line, comments=True)
        except ValueError as e:
            raise PlanInputError(f"the command does not split as a shell would ({e}); fix: "
                                 "paste the launch command alone") from None
    for i, token in enumerate(argv):
        if token.endswith(entry):
            return [a for a in argv[i + 1:] if a not in ("$@", "${@}")]
        if " " in token and any(e in token for e in entry):  # bash -c "... entry ..."
            return launch_argv([token], entry, example)
    raise PlanInputError(f"the command has no entry point {entry[0]}: give it as typed, e.g. "
                         f"-- {example}")


def parse_cluster(text: str) -> list[NodeCapacity]:
    """``NxG`` (N nodes of G GPUs) or ``G1,G2,...`` (one entry per node); PlanInputError
    otherwise."""
    try:
        if "x" in text:
            n, g = (int(v) for v in text.split("x"))
            gpus = [g] * bounded(n, "--cluster nodes", 1, MAX_NODES)  # before the list
        else:
            gpus = [int(v) for v in text.split(",")]
    except PlanInputError:
        raise
    except ValueError:
        gpus = []
    if not gpus or any(g < 0 for g in gpus):
        raise PlanInputError(f"--cluster {text}: write NODESxGPUS (e.g. 4x8) or the GPUs of each "
                             "node, comma-joined (e.g. 8,8,4)")
    bounded(len(gpus), "--cluster nodes", 1, MAX_NODES)
    bounded(max(gpus), "--cluster GPUs per node", 0, MAX_GPUS_PER_NODE)
    return [NodeCapacity(g) for g in gpus]


class _Free:
    """What is left of each node while groups are placed: GPU indices and CPUs."""

    def __init__(self, nodes: list[NodeCapacity]) -> None:
        self.gpus = [list(range(n.gpus)) for n in nodes]
        self.cpus = [n.cpus for n in nodes]

    def room(self, node: int, group: Group, bundles: int) -> bool:
        cpus = self.cpus[node]
        return len(self.gpus[node]) >= bundles and (cpus is None or cpus >= group.cpus * bundles)

    def take(self, node: int, group: Group, bundles: int) -> list[tuple[int, int]]:
        if group.gpu_ids is not None:
            taken = list(group.gpu_ids)
            self.gpus[node] = [g for g in self.gpus[node] if g not in taken]
        else:
            taken, self.gpus[node] = self.gpus[node][:bundles], self.gpus[node][bundles:]
        if self.cpus[node] is not None:
            self.cpus[node] -= group.cpus * bundles
        return [(node, gpu) for gpu in taken]

    def describe(self) -> str:
        return ", ".join(f"node {i}: {len(g)} GPUs" + (f" {c:g} CPUs" if c is not None else "")
                         for i, (g, c) in enumerate(zip(self.gpus, self.cpus, strict=True)))


def _place_one(free: _Free, group: Group) -> list[tuple[int, int]] | None:
    """Lay ``group`` onto the free resources as Ray's strategy would, or None (unplaceable)."""
    n, nodes = group.gpus, range(len(free.gpus))
    if group.strategy == "NODE":
        node = group.node if group.node is not None else -1
        if not 0 <= node < len(free.gpus) or not free.room(node, group, n) or not set(
                group.gpu_ids or []) <= set(free.gpus[node]):
            return None
        return free.take(node, group, n)
    whole = [i for i in nodes if free.room(i, group, n)]
    if whole and group.strategy in ("PACK", "STRICT_PACK"):
        # best fit: the node that has least left over (Ray packs onto as few nodes as it can)
        return free.take(min(whole, key=lambda i: len(free.gpus[i])), group, n)
    if group.strategy == "STRICT_PACK":
        return None
    if group.strategy == "STRICT_SPREAD":
        spread = [i for i in nodes if free.room(i, group, 1)][:n]
        return [s for i in spread for s in free.take(i, group, 1)] if len(spread) == n else None
    # PACK over several nodes (fullest first), SPREAD one bundle per node in turn
    slots: list[tuple[int, int]] = []
    order = sorted(nodes, key=lambda i: -len(free.gpus[i]))
    if sum(min(len(free.gpus[i]), _cpu_room(free, i, group)) for i in order) < n:
        return None
    while len(slots) < n:
        for i in order:
            k = 1 if group.strategy == "SPREAD" else n - len(slots)
            k = min(k, len(free.gpus[i]), _cpu_room(free, i, group), n - len(slots))
            if k > 0:
                slots += free.take(i, group, k)
    return slots


def _cpu_room(free: _Free, node: int, group: Group) -> int:
    cpus = free.cpus[node]
    return 10**9 if cpus is None or group.cpus == 0 else int(cpus // group.cpus)


def place(layout: Layout, nodes: list[NodeCapacity]) -> Placement:
    """Place ``layout``'s groups in order on ``nodes``, as Ray would, and judge the launch:
    the reader's findings, then over-subscription and each group Ray could not place."""
    free = _Free(nodes)
    findings = list(layout.findings)
    for check in layout.prechecks:
        findings += check(nodes)
    asked, there = sum(g.gpus for g in layout.groups), sum(n.gpus for n in nodes)
    if asked > there:
        by: dict[str, list[Group]] = {}
        for g in layout.groups:
            by.setdefault(g.sized_by, []).append(g)
        sizes = ", ".join(f"{gs[0].name} {gs[0].gpus}" if len(gs) == 1 else
                          f"{len(gs)} groups, {sum(g.gpus for g in gs)} GPUs" + f" ({k})"
                          for k, gs in by.items())
        findings.append(Concern("error", f"the launch asks for {asked} GPUs, the cluster has "
                                         f"{there} ({sizes}).",
                                "shrink the groups above, colocate roles, or add nodes"))
    slots, missing = [], []
    for group in layout.groups:
        before = free.describe()
        got = _place_one(free, group)
        slots.append(got)
        if got is not None:
            findings += _split(group, got)
        elif group.strategy == "NODE" and (group.node or 0) >= len(nodes):
            missing.append(group)  # pinned to a node the cluster lacks: said once, below
        else:
            bundle = group.bundles()[0] if group.bundles() else {}
            where = (f" on node {group.node}" if group.strategy == "NODE" else "")
            findings.append(Concern(
                "error",
                f"{group.name}: {len(group.bundles())} bundle(s) of {_shape(bundle)} "
                f"({group.strategy}){where} cannot be placed; free before it: {before}. Ray "
                "would wait for it forever (the framework sets no timeout).",
                f"change {group.sized_by}"))
    if missing:
        first, last = missing[0].node, missing[-1].node
        findings.append(Concern(
            "error", f"GPUs pinned to node(s) {first}-{last} ({sum(g.gpus for g in missing)} "
            f"GPUs): the cluster has nodes 0-{len(nodes) - 1}.", f"change {missing[0].sized_by}"))
    return Placement(layout, nodes, slots, findings)


def _split(group: Group, slots: list[tuple[int, int]]) -> list[Concern]:
    """A tensor-parallel set of ``group`` whose GPUs landed on more than one node."""
    out = []
    for label, bundles in group.together.items():
        nodes = sorted({slots[b][0] for b in bundles if b < len(slots)})
        if len(nodes) > 1:
            out.append(Concern(group.apart_is, f"{label} spans nodes {nodes}: its "
                               "tensor-parallel traffic crosses the network.",
                               f"make {group.sized_by} fill whole nodes"))
    return out


def _shape(bundle: dict[str, float]) -> str:
    return "{" + ", ".join(f'"{k}": {v:g}' for k, v in bundle.items()) + "}"


def render(p: Placement) -> str:
    """The placement as text: the map (node x GPU -> workers), the totals, the findings."""
    lines = [f"{p.layout.framework} ({p.layout.version})",
             f"GPUs asked: {p.asked}; GPUs there: {p.there} "
             f"({len(p.nodes)} node(s): {', '.join(str(n.gpus) for n in p.nodes)})", ""]
    for g, slots in zip(p.layout.groups, p.slots, strict=True):
        state = "not placed" if slots is None else "on " + _nodes_of(slots)
        lines.append(f"  group {g.name}: {g.gpus} GPUs, {g.strategy}, {state} "
                     f"(sized by {g.sized_by})")
    lines.append("")
    for node, gpus in p.gpu_map().items():
        for gpu, workers in gpus.items():
            lines.append(f"  node {node} GPU {gpu}: {', '.join(workers) or '-'}")
    lines += [""] + [f"  note: {n}" for n in p.layout.notes]
    lines += [f"  {f.line()}" for f in p.findings]
    lines.append("FITS" if p.fits else "DOES NOT FIT")
    return "\n".join(line for i, line in enumerate(lines) if line or lines[i - 1])


def _nodes_of(slots: list[tuple[int, int]]) -> str:
    nodes = sorted({n for n, _ in slots})
    return "node " + ", ".join(str(n) for n in nodes) if len(nodes) < 2 else \
        "nodes " + ", ".join(str(n) for n in nodes)
