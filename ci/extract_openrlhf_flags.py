"""Write every --flag of OpenRLHF's train_ppo_ray.py at a git revision, with its kind and default,
as JSON: the lists `rlsim plan openrlhf` reads a launch command against (rlsim/plan/data).

    python ci/extract_openrlhf_flags.py OPENRLHF_GIT_DIR v0.11.0 \
        > rlsim/plan/data/openrlhf-v0.11.0.json

Kinds: switch (store_true/false), value (one value), many (nargs + or *), nN (exactly N values).
Flags made in a loop (``for prefix in ("actor", "critic"): add_argument(f"--{prefix}.adam.lr")``)
are expanded for each value of the loop.
"""
import ast
import json
import subprocess
import sys


def kind_and_default(call: ast.Call) -> tuple[str, object]:
    kw = {k.arg: k.value for k in call.keywords}
    action = kw.get("action")
    kind = "switch" if isinstance(action, ast.Constant) and action.value in (
        "store_true", "store_false") else "value"
    nargs = kw.get("nargs")
    if isinstance(nargs, ast.Constant):
        kind = {"+": "many", "*": "many", "?": "value"}.get(nargs.value, f"n{nargs.value}")
    try:
        default = ast.literal_eval(kw["default"]) if "default" in kw else None
    except ValueError:
        default = None
    return kind, default


def names(call: ast.Call, loops: dict[str, list[str]]) -> list[str]:
    out = []
    for a in call.args:
        if isinstance(a, ast.Constant) and str(a.value).startswith("--"):
            out.append(a.value)
        elif isinstance(a, ast.JoinedStr):
            var = next((v.value.id for v in a.values if isinstance(v, ast.FormattedValue)
                        and isinstance(v.value, ast.Name)), None)
            for value in loops.get(var, []):
                text = "".join(p.value if isinstance(p, ast.Constant) else value
                               for p in a.values)
                if text.startswith("--"):
                    out.append(text)
    return out


def walk(node: ast.AST, loops: dict[str, list[str]], flags: dict) -> None:
    if isinstance(node, ast.For) and isinstance(node.target, ast.Name):
        try:
            values = [str(v) for v in ast.literal_eval(node.iter)]
        except ValueError:
            values = []
        loops = {**loops, node.target.id: values}
    if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
        kind, default = kind_and_default(node)
        for name in names(node, loops):
            flags[name] = [kind, default]
    for child in ast.iter_child_nodes(node):
        walk(child, loops, flags)


def main(repo: str, rev: str) -> None:
    path = "openrlhf/cli/train_ppo_ray.py"
    src = subprocess.run(["git", "-C", repo, "show", f"{rev}:{path}"], capture_output=True,
                         text=True, check=True).stdout
    commit = subprocess.run(["git", "-C", repo, "rev-list", "-n1", rev], capture_output=True,
                            text=True, check=True).stdout.strip()
    flags: dict = {}
    walk(ast.parse(src), {}, flags)
    print(json.dumps({"source": "github.com/OpenRLHF/OpenRLHF", "revision": rev,
                      "commit": commit, "file": path, "flags": dict(sorted(flags.items()))},
                     indent=0))


if __name__ == "__main__":
    main(*sys.argv[1:3])
