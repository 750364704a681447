"""docs/concepts/layout.md says what the tree holds: its module list is what
docs/hooks/layout.py makes of rlsim/ now, and every path under rlsim/ it names exists."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "hooks"))

import layout  # noqa: E402 - the page's own generator, beside the reference hook


def test_the_module_list_is_the_trees():
    said, made = layout.section(layout.PAGE.read_text()), layout.table()
    assert said == made, "docs/concepts/layout.md is out of date: run python docs/hooks/layout.py"


def test_every_path_the_page_names_exists():
    page = layout.PAGE.read_text()
    named = {m.rstrip("/") for m in re.findall(r"`(rlsim/[^`<>*]+)`", page)}
    assert named
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert missing == []


def test_the_list_misses_no_module_and_names_none_that_is_gone(tmp_path):
    pkg = tmp_path / "rlsim"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""The top. More."""\n')
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text('"""Does a: with b. And more."""\n')
    root, layout.ROOT = layout.ROOT, tmp_path
    try:
        rows = layout.modules(pkg)
    finally:
        layout.ROOT = root
    assert rows == [("rlsim/", "The top."), ("rlsim/sub/", ""), ("rlsim/sub/a.py", "Does a")]
