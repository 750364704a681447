"""Write every --flag of OpenRLHF's train_ppo_ray.py in every release from v0.5.0 on, with its
kind and default, as JSON: what `rlsim plan openrlhf` reads a launch command against.

    python ci/extract_openrlhf_flags.py OPENRLHF_GIT_DIR > rlsim/plan/data/openrlhf-flags.json
    python ci/extract_openrlhf_flags.py OPENRLHF_GIT_DIR v0.11.0   # one revision, as before

The file lists the releases in order (with their commits) and, per flag, the runs of releases
over which its kind and default stay the same: ``[first, last, kind, default]`` (indices into the
releases).

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


PATH = "openrlhf/cli/train_ppo_ray.py"


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True,
                          check=True).stdout


def flags_at(repo: str, rev: str) -> dict:
    flags: dict = {}
    walk(ast.parse(git(repo, "show", f"{rev}:{PATH}")), {}, flags)
    return dict(sorted(flags.items()))


def releases(repo: str) -> list[str]:
    """Every release tag from v0.5.0 on, oldest first (v0.5.9.post1 after v0.5.9)."""
    def order(tag: str) -> list[int]:
        main, _, post = tag.lstrip("v").partition(".post")
        return [int(x) for x in main.split(".")] + [int(post or -1)]
    tags = [t for t in git(repo, "tag").split() if t.startswith("v0.")]
    return sorted((t for t in tags if order(t) >= [0, 5, 0, -1]), key=order)


def every_release(repo: str) -> dict:
    tags = releases(repo)
    runs: dict[str, list] = {}
    for i, tag in enumerate(tags):
        for name, (kind, default) in flags_at(repo, tag).items():
            run = runs.setdefault(name, [])
            if run and run[-1][1] == i - 1 and run[-1][2:] == [kind, default]:
                run[-1][1] = i
            else:
                run.append([i, i, kind, default])
    return {"source": "github.com/OpenRLHF/OpenRLHF", "file": PATH, "releases": tags,
            "commits": [git(repo, "rev-list", "-n1", t).strip() for t in tags],
            "flags": dict(sorted(runs.items()))}


def main(repo: str, rev: str | None = None) -> None:
    if rev is None:
        print(json.dumps(every_release(repo), separators=(",", ":")))
        return
    print(json.dumps({"source": "github.com/OpenRLHF/OpenRLHF", "revision": rev,
                      "commit": git(repo, "rev-list", "-n1", rev).strip(), "file": PATH,
                      "flags": flags_at(repo, rev)}, indent=0))


if __name__ == "__main__":
    main(*sys.argv[1:3])
