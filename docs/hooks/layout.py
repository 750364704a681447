"""The module list of docs/concepts/layout.md, made from the tree: every package and module under
``rlsim/`` with the first sentence of its docstring, read with ``ast`` (nothing imported).

    python docs/hooks/layout.py    rewrites the list between the page's markers

``tests/unit/test_layout_page.py`` fails when the page's list is not what this makes of the tree
(a module added, moved or removed without the page), or when the page names a path under
``rlsim/`` that does not exist.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "concepts" / "layout.md"
BEGIN = "<!-- modules: made by docs/hooks/layout.py from the tree; do not edit by hand -->"
END = "<!-- end of modules -->"


def first_sentence(path: Path) -> str:
    """The first sentence of the module's docstring, on one line ('' without one)."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    text = " ".join(doc.split("\n\n")[0].split())
    match = re.match(r"(.+?[.:])(\s|$)", text)
    sentence = (match.group(1) if match else text).rstrip(":") if text else ""
    return sentence.replace("|", "\\|")


def modules(package: Path) -> list[tuple[str, str]]:
    """(path relative to the repository, first sentence) of every package (its ``__init__``)
    and module under ``package``, in path order."""
    out = []
    for path in sorted(package.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        shown = path.parent if path.name == "__init__.py" else path
        rel = shown.relative_to(ROOT).as_posix() + ("/" if path.name == "__init__.py" else "")
        out.append((rel, first_sentence(path)))
    return out


def table(package: Path | None = None) -> str:
    rows = ["| module | what it is |", "|---|---|"]
    rows += [f"| `{rel}` | {what} |" for rel, what in modules(package or ROOT / "rlsim")]
    return "\n".join(rows)


def section(page: str) -> str:
    """The page's list as it stands, between the markers."""
    return page.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")


def main() -> int:
    page = PAGE.read_text()
    before, rest = page.split(BEGIN, 1)
    after = rest.split(END, 1)[1]
    PAGE.write_text(f"{before}{BEGIN}\n{table()}\n{END}{after}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
