"""Print, one per line, the ``uv pip install`` options that make uv install from where pip
would on this machine: pip's index, extra indexes, find-links and constraints, as
``pip config list`` reports them (its files and ``PIP_*`` variables), and pip's choice of the
best version across every index. uv reads none of pip's configuration itself: without these, a
machine whose wheels lie on its disk (torch's CPU build here) would get PyPI's instead.

    mapfile -t flags < <(.venv/bin/python ci/uv_flags.py)
"""
import shlex
import subprocess
import sys

# pip's option, uv's; each takes a list (whitespace-separated in pip's configuration)
OPTIONS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url",
           "find-links": "--find-links", "constraint": "--constraint"}
# where pip reads an option from, the one that wins first: its variables, then the install
# command's section, then the global one
SECTIONS = (":env:", "install", "global")


def flags(config_list: str) -> list[str]:
    """uv's options for the lines of ``pip config list`` (``section.key='value'``)."""
    found: dict[tuple[str, str], str] = {}
    for line in config_list.splitlines():
        name, sep, value = line.partition("=")
        section, _, key = name.rpartition(".")
        if sep and key in OPTIONS and section in SECTIONS:
            found[section, key] = shlex.split(value)[0] if value.strip() else ""
    out = ["--index-strategy", "unsafe-best-match"]  # pip's: the best version of any index
    for key, option in OPTIONS.items():
        section = next((s for s in SECTIONS if (s, key) in found), None)
        for item in found[section, key].split() if section else []:
            out += [option, item]
    return out


def main() -> None:
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                            capture_output=True, text=True, check=True).stdout
    print("\n".join(flags(listed)))


if __name__ == "__main__":
    main()
