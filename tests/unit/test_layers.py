"""The layers stay as drawn: no import cycle between rlsim's subpackages (imports inside functions
counted), and none of the imports the layering forbids. Read from the source with ``ast``; the
graph is built by the same function the test checks on a tree of its own, so it can fail."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

RLSIM = Path(__file__).parents[2] / "rlsim"

# (importer, imported) pairs the layering forbids; "trainer" is the reference trainer's package
FORBIDDEN = {
    ("backends", "scenario"): "a backend hosts any workload; the runner drives it",
    ("backends", "trainer"): "a backend imports nothing of the trainer (rlsim.contract is shared)",
    ("backends", "faults"): "faults use backends, not the other way round",
    ("checks", "faults"): "a fault writes what it means into the history; checks read that",
    ("checks", "scenario"): "checks judge the history alone",
    ("host", "backends"): "host plumbing knows no backend",
    ("history", "*"): "the record every judge reads stands on nothing of rlsim",
    ("result", "scenario"): "a result is read by reports without the engine",
    ("report", "scenario"): "reports read results and histories, never run anything",
    ("faults", "scenario"): "a fault sees a backend, never the runner",
}
FRONT_ENDS = {"commands", "plugin", "__main__"}  # nothing of the engine imports these
BASES = {"files", "fields"}  # the standard-library helpers everything may stand on


def import_graph(package: Path) -> dict[tuple[str, str], list[str]]:
    """(importing subpackage, imported subpackage or ``trainer``) -> the import lines, over every
    module of ``package`` (a top-level module counts as a subpackage of its own)."""
    name = package.name
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).with_suffix("")
        parts = list(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        src = parts[1] if len(parts) > 1 else name
        for node in ast.walk(ast.parse(path.read_text())):
            for target in _targets(node, parts, path.name == "__init__.py"):
                head, _, rest = target.partition(".")
                if head == "trainer":
                    dst = "trainer"
                elif head == name and rest:
                    dst = rest.split(".")[0]
                    if not ((package / dst).is_dir() or (package / f"{dst}.py").is_file()):
                        continue  # a name re-exported by the package itself
                else:
                    continue
                if dst != src:
                    edges[(src, dst)].append(f"{path.relative_to(package.parent)}:{node.lineno}")
    return dict(edges)


def _targets(node: ast.AST, parts: list[str], is_init: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = parts if is_init else parts[:-1]
        base = base[:len(base) - node.level + 1]
        module = ".".join(base + ([node.module] if node.module else []))
    else:
        module = node.module or ""
    return [module] + [f"{module}.{a.name}" for a in node.names]


def cycles(edges) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    graph = defaultdict(set)
    for src, dst in edges:
        graph[src].add(dst)
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def test_no_cycle_between_subpackages():
    edges = import_graph(RLSIM)
    found = cycles(edges)
    lines = [line for comp in found for (a, b), where in edges.items()
             if a in comp and b in comp for line in where]
    assert found == [], f"import cycles {found}, through: {lines}"


def test_no_import_the_layering_forbids():
    bad = []
    for (src, dst), where in import_graph(RLSIM).items():
        for (a, b), why in FORBIDDEN.items():
            if src == a and (dst == b or b == "*" and dst not in BASES):
                bad.append(f"{src} -> {dst} ({why}): {', '.join(where)}")
        if dst in FRONT_ENDS and src not in FRONT_ENDS:
            bad.append(f"{src} -> {dst} (the engine never imports a front end): {where}")
    assert bad == []


def test_the_graph_sees_imports_inside_functions(tmp_path):
    pkg = tmp_path / "pkg"
    for sub in ("a", "b"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "x.py").write_text("from pkg.b import y\n")
    (pkg / "b" / "y.py").write_text("def late():\n    from ..a import x\n    import trainer.z\n")
    edges = import_graph(pkg)
    assert set(edges) == {("a", "b"), ("b", "a"), ("b", "trainer")}
    assert cycles(edges) == [["a", "b"]]
