"""Write the config keys of verl's ppo_trainer in each release (its flattened defaults: the
generated file where the release has one, else ppo_trainer.yaml itself, which was flat up to
v0.4.1), as JSON: what `rlsim plan verl` accepts an override of, release by release.

    python ci/extract_verl_keys.py VERL_GIT_DIR > rlsim/plan/data/verl-keys.json

The file lists the releases (and their commits) oldest first and, per dotted key, the runs of
releases that have it: ``[first, last]`` (indices into the releases).
"""
import json
import subprocess
import sys

import yaml

RELEASES = ("v0.2.0.post2", "v0.3.0.post1", "v0.4.0", "v0.4.1", "v0.5.0", "v0.6.0", "v0.6.1", "v0.7.0", "main")
FILES = ("verl/trainer/config/_generated_ppo_trainer.yaml", "verl/trainer/config/ppo_trainer.yaml")


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True,
                          check=True).stdout


def keys(node, prefix: str = "") -> list[str]:
    out = []
    if isinstance(node, dict):
        for k, v in node.items():
            if str(k) == "defaults" and not prefix:
                continue
            out.append(prefix + str(k))
            out += keys(v, f"{prefix}{k}.")
    return out


def main(repo: str) -> None:
    files = set(git(repo, "ls-tree", "-r", "--name-only", "HEAD").split())
    runs: dict[str, list] = {}
    commits = []
    for i, rev in enumerate(RELEASES):
        listing = set(git(repo, "ls-tree", "-r", "--name-only", rev).split())
        path = next(f for f in FILES if f in listing)
        commits.append(git(repo, "rev-list", "-n1", rev).strip())
        for key in keys(yaml.safe_load(git(repo, "show", f"{rev}:{path}"))):
            run = runs.setdefault(key, [])
            if run and run[-1][1] == i - 1:
                run[-1][1] = i
            else:
                run.append([i, i])
    del files
    print(json.dumps({"source": "github.com/volcengine/verl", "releases": list(RELEASES),
                      "commits": commits, "keys": dict(sorted(runs.items()))},
                     separators=(",", ":")))


if __name__ == "__main__":
    main(sys.argv[1])
