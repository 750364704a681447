"""The layers stay as drawn: no import cycle between rlsim's subpackages (imports inside functions
counted), and none of the imports the layering forbids. Read from the source with ``ast``; the
graph is built by the same function the test checks on a tree of its own, so it can fail."""

from __future__ import annotations

import ast
import re
from collections import Counter, defaultdict
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
    ("ray_internals", "backends"): "Ray's annex is a base layer: backends and the reference "
                                   "trainer stand on it",
    ("ray_internals", "scenario"): "Ray's annex is a base layer",
    ("ray_internals", "faults"): "Ray's annex is a base layer",
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


def test_the_reference_trainer_stands_on_no_backend():
    """The reference trainer runs on any cluster: it may use Ray's annex and the contract, never
    a backend's package (imports inside functions counted)."""
    trainer = RLSIM.parent / "trainer"
    bad = [f"{path.relative_to(RLSIM.parent)}:{node.lineno} imports {name}"
           for path in sorted(trainer.rglob("*.py"))
           for node in ast.walk(ast.parse(path.read_text()))
           for name in _targets(node, ["trainer", *path.relative_to(trainer).with_suffix("")
                                       .parts], path.name == "__init__.py")
           if name == "rlsim.backends" or name.startswith("rlsim.backends.")]
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


# ---- Ray's private surface lives in one annex ----------------------------------------------------

ANNEX = RLSIM / "ray_internals"
SETTINGS = ANNEX / "settings.py"  # where the annex names each setting it uses, once
# what the layering may scan for Ray's private surface: rlsim, the reference trainer, the
# catalogue's own trainers
SCANNED = [RLSIM, RLSIM.parent / "trainer", RLSIM.parent / "scenarios" / "trainers"]
PRIVATE_MODULES = ("ray._private", "ray._raylet", "ray.core.generated", "ray._common")
RAW_RPC = re.compile(r"^/ray\.rpc\.")
CONFIG_FLAG = re.compile(r"\bRAY_[a-z]")  # Ray's C++ config: every RAY_<lower_case> name
RAY_SETTING = re.compile(r"^(RAY_[A-Z][A-Z0-9_]*)=?$")  # a setting of Ray's Python, by name
# a flag of a command line Ray builds: an agent's command in the raylet's, the raylet's node, the
# GCS's port and address (``ray start``'s own flags are kebab-case and public)
RAY_FLAG = re.compile(r"^--([a-z_]+_command=|(node_id|node-id|gcs_server_port|node_ip_address)"
                      r"(=|$))")
# what Ray's processes are called: its daemons' executables, its workers' script and titles
RAY_PROCESSES = {"raylet", "gcs_server"}
RAY_SCRIPT = re.compile(r"(^|/)(default_worker|setup_worker)\.py$")
RAY_TITLE = "ray::"
HEAD_RESOURCE = "__internal_head__"  # Ray's resource of the head node: node:__internal_head__
# an environment variable's name, such as Ray's Python reads (AUTOSCALER_METRIC_PORT)
ENV_NAME = re.compile(r"^[A-Z][A-Z0-9]*(_[A-Z0-9]+)+=?$")


def _declared() -> tuple[set[str], set[str]]:
    """The settings of Ray's that Ray documents, and those it does not, as the annex declares
    them (rlsim.ray_internals.settings): the list the scan holds every module to."""
    from rlsim.ray_internals.settings import DOCUMENTED, UNDOCUMENTED

    return set(DOCUMENTED), set(UNDOCUMENTED)


def _strings(tree: ast.Module):
    """Every string constant of ``tree`` that is not a docstring (docstrings are prose)."""
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef
                                | ast.AsyncFunctionDef)
                  and n.body and isinstance(n.body[0], ast.Expr)
                  and isinstance(n.body[0].value, ast.Constant)}
    return [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docstrings]


def _names_private(text: str, documented: set[str], undocumented: set[str]) -> bool:
    """``text`` (a string of code) names a part of Ray's private surface."""
    setting = RAY_SETTING.match(text)
    return bool(RAW_RPC.search(text) or CONFIG_FLAG.search(text) or RAY_FLAG.search(text)
                or text in undocumented or (setting and setting.group(1) not in documented)
                or text.startswith(RAY_TITLE) or text in RAY_PROCESSES
                or RAY_SCRIPT.search(text) or HEAD_RESOURCE in text)


def private_ray_uses(path: Path) -> list[str]:
    """Each use of Ray's private surface in the module at ``path``: an import of a private
    module (``ray._private``, ``ray._raylet``, ``ray.core.generated``, any ``_internal``), an
    attribute ``ray._x``, a raw RPC path, a RAY_ config setting, a setting of Ray's its docs do
    not name, a flag of a command line Ray builds (a raylet's agent command, ``--node_id``), a
    name or title of Ray's processes (``raylet``, ``ray::...``, ``default_worker.py``), the
    head's resource. Docstrings are prose, not uses."""
    tree = ast.parse(path.read_text())
    documented, undocumented = _declared()
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if name.startswith(PRIVATE_MODULES) or (name.startswith("ray.")
                                                    and "._" in name):
                found.append(f"{path}:{node.lineno} imports {name}")
                break
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                node.value.id == "ray" and node.attr.startswith("_"):
            found.append(f"{path}:{node.lineno} uses ray.{node.attr}")
    found += [f"{path}:{node.lineno} names {node.value[:60]!r}" for node in _strings(tree)
              if _names_private(node.value, documented, undocumented)]
    return found


def test_only_the_annex_touches_rays_private_surface():
    found = [use for top in SCANNED for path in sorted(top.rglob("*.py"))
             if not path.is_relative_to(ANNEX) for use in private_ray_uses(path)]
    assert found == [], "Ray's private surface outside rlsim/ray_internals:\n" + \
        "\n".join(found)


def test_the_scan_sees_every_kind_of_private_use(tmp_path):
    mod = tmp_path / "m.py"
    mod.write_text('"""RAY_health_check_period_ms in a docstring is prose."""\n'
                   "import ray._private.services\n"
                   "from ray.core.generated import gcs_pb2\n"
                   "from ray.train.v2._internal.execution import callback\n"
                   "def f():\n"
                   "    import ray\n"
                   "    ray._private.state.state.get_draining_nodes()\n"
                   "    env = {'RAY_enable_metrics_collection': '0', 'RAY_ADDRESS': 'x'}\n"
                   "    m = '/ray.rpc.NodeManagerService/PrestartWorkers'\n"
                   "    a = '--dashboard_agent_command=' + 'RAY_OVERRIDE_LABELS'\n"
                   "    b = {'RAY_SOMETHING_NEW': '1', 'AUTOSCALER_METRIC_PORT': '1'}\n"
                   "    c = ['ray::DashboardAgent', 'raylet', 'gcs_server', 'raylet pid']\n"
                   "    d = ['--node_id', '--gcs_server_port=', '--node-ip-address']\n"
                   "    o = '--ckpt_path'\n"
                   "    e = ('default_worker.py', 'x/ray/_private/workers/setup_worker.py')\n"
                   "    h = {'node:__internal_head__': 1}\n")
    uses = sorted(u.split(" ", 1)[1] for u in private_ray_uses(mod))
    assert uses == sorted(["imports ray._private.services", "imports ray.core.generated",
                    "imports ray.train.v2._internal.execution", "uses ray._private",
                    "names 'RAY_enable_metrics_collection'",
                    "names '/ray.rpc.NodeManagerService/PrestartWorkers'",
                    "names '--dashboard_agent_command='", "names 'RAY_OVERRIDE_LABELS'",
                    "names 'RAY_SOMETHING_NEW'", "names 'AUTOSCALER_METRIC_PORT'",
                    "names 'ray::DashboardAgent'", "names 'raylet'", "names 'gcs_server'",
                    "names '--node_id'", "names '--gcs_server_port='",
                    "names 'default_worker.py'",
                    "names 'x/ray/_private/workers/setup_worker.py'",
                    "names 'node:__internal_head__'"])


# ---- the annex names each setting it uses, once, and declares it ---------------------------------


def setting_names(path: Path) -> list[tuple[int, str]]:
    """The settings the module at ``path`` names (line, name): a string that is a RAY_ setting's
    name (``RAY_x``, ``RAY_X``, with or without ``=``), and an environment variable's name
    (upper case, with an underscore) where a module gives or reads one: a key of a dict, an
    ``os.environ`` subscript, the first argument of ``getenv`` or of ``environ.get``, ``pop``,
    ``setdefault``, or, in rlsim.ray_internals.settings, a name's value."""
    tree = ast.parse(path.read_text())
    env_like = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            env_like |= {id(k) for k in node.keys if k is not None}
        elif isinstance(node, ast.Subscript):
            env_like.add(id(node.slice))
        elif isinstance(node, ast.Call) and node.args and getattr(node.func, "attr", getattr(
                node.func, "id", "")) in ("getenv", "get", "pop", "setdefault"):
            env_like.add(id(node.args[0]))
        elif isinstance(node, ast.Assign) and path.name == SETTINGS.name:
            env_like |= {id(n) for n in ast.walk(node.value)}
    found = [n for n in _strings(tree) if re.fullmatch(r"RAY_\w+=?", n.value)
             or id(n) in env_like and ENV_NAME.match(n.value)]
    return [(n.lineno, n.value.rstrip("=")) for n in sorted(
        found, key=lambda n: (n.lineno, n.col_offset))]


def test_the_annex_declares_every_setting_it_names():
    """Every setting of Ray's the annex names is in the annex's list of Ray's documented or of
    its undocumented settings (rlsim's own, RLSIM_*, aside), and is spelled once, in
    rlsim/ray_internals/settings.py, which every other module takes it from: the list the
    layering holds rlsim to cannot drift from what the annex uses."""
    documented, undocumented = _declared()
    assert documented.isdisjoint(undocumented), \
        f"declared both documented and not: {sorted(documented & undocumented)}"
    named = [(path, line, name) for path in sorted(ANNEX.rglob("*.py"))
             for line, name in setting_names(path) if not name.startswith("RLSIM_")]
    undeclared = [f"{p.relative_to(RLSIM.parent)}:{line} {name}" for p, line, name in named
                  if name not in documented | undocumented]
    assert undeclared == [], ("settings the annex uses but does not declare in "
                              "rlsim/ray_internals/settings.py (DOCUMENTED or UNDOCUMENTED): "
                              + ", ".join(undeclared))
    elsewhere = [f"{p.relative_to(RLSIM.parent)}:{line} {name}" for p, line, name in named
                 if p != SETTINGS]
    assert elsewhere == [], ("a setting spelled outside rlsim/ray_internals/settings.py (name "
                             "it there and import it): " + ", ".join(elsewhere))
    spelled = Counter(name for p, _, name in named if p == SETTINGS)
    assert {n: c for n, c in spelled.items() if c > 1} == {}, "a setting spelled twice there"


def test_the_settings_check_sees_a_setting_the_annex_does_not_declare(tmp_path):
    mod = tmp_path / "m.py"
    mod.write_text('"""RAY_NEW in a docstring is prose."""\n'
                   "import os\n"
                   "ENV = {'RAY_ADDRESS': 'x', 'NEW_PORT': '1', 'lower': '2', 'PATH': '/'}\n"
                   "a = os.environ.get('RAY_new_flag'), os.getenv('OTHER_VAR')\n"
                   "os.environ['SET_HERE'] = '1'\n"
                   "b = ('NORMAL_TASK', 'RAY_X=')\n")
    assert setting_names(mod) == [(3, "RAY_ADDRESS"), (3, "NEW_PORT"), (4, "RAY_new_flag"),
                                  (4, "OTHER_VAR"), (5, "SET_HERE"), (6, "RAY_X")]


# ---- what a cluster can do is declared, never probed ---------------------------------------------

def capability_probes(path: Path) -> list[str]:
    """``hasattr``/``getattr`` asked of a cluster (a name or attribute ``cluster``): what a
    backend can do is declared by the protocols of rlsim/backends/base.py and asked with
    ``isinstance``, so a method renamed on one backend fails loudly, not silently skipped."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("hasattr", "getattr") and node.args:
            target = node.args[0]
            name = target.id if isinstance(target, ast.Name) else \
                target.attr if isinstance(target, ast.Attribute) else \
                getattr(target.func, "id", "") if isinstance(target, ast.Call) else ""
            if name in ("cluster", "type") and "cluster" in ast.unparse(target):
                found.append(f"{path}:{node.lineno} {ast.unparse(node)}")
    return found


def test_no_capability_of_a_cluster_is_found_by_hasattr():
    found = [p for path in sorted(RLSIM.rglob("*.py")) for p in capability_probes(path)]
    assert found == []


def test_the_probe_scan_sees_one(tmp_path):
    mod = tmp_path / "m.py"
    mod.write_text("def f(cluster, self):\n    hasattr(cluster, 'spread')\n"
                   "    getattr(self.cluster, 'x', None)\n    callable(getattr(type(cluster), "
                   "'logs', None))\n    hasattr(opts, 'y')\n")
    assert [line.split(" ", 1)[0].rsplit(":", 1)[1] for line in capability_probes(mod)] == \
        ["2", "3", "4"]
