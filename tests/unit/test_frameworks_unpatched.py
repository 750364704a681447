"""The frameworks rlsim runs for real are installed as their wheels shipped them: every file that
a distribution's RECORD lists with a hash still has that hash (nothing of OpenRLHF or verl is
patched to run on fake GPUs; the device stand-in and the verl platform plugin live in rlsim).
Skipped where the framework is not installed (``ci/setup.sh --openrlhf`` / ``--verl``)."""

from __future__ import annotations

import base64
import hashlib
from importlib import metadata

import pytest


def changed_files(dist: metadata.Distribution, package: str) -> tuple[int, list[str]]:
    """How many of ``dist``'s files in ``package`` RECORD hashes, and those whose content no
    longer matches. Only the framework's own package: verl's and OpenRLHF's wheels both ship a
    top-level ``tests/__init__.py``, and the second installed replaces the first's."""
    checked, changed = 0, []
    for f in dist.files or []:
        if f.hash is None or f.hash.mode != "sha256" or f.parts[0] != package:
            continue
        path = f.locate()
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            changed.append(f"{f} (missing)")
            continue
        checked += 1
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        if digest != f.hash.value:
            changed.append(str(f))
    return checked, changed


@pytest.mark.parametrize("name", ["openrlhf", "verl"])
def test_no_file_of_the_framework_is_patched(name):
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        pytest.skip(f"{name} is not installed (ci/setup.sh --{name})")
    checked, changed = changed_files(dist, name)
    assert checked > 50, f"{name} {dist.version}: only {checked} files hashed in its RECORD"
    assert changed == [], f"{name} {dist.version}: changed since its wheel: {changed[:10]}"


def test_a_changed_file_is_found(tmp_path, monkeypatch):
    """The check itself: a distribution whose one file was edited after install is caught."""
    site = tmp_path / "site"
    (site / "pkg").mkdir(parents=True)
    body = b"x = 1\n"
    (site / "pkg" / "__init__.py").write_bytes(body)
    digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
    info = site / "pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n")
    (info / "RECORD").write_text(f"pkg/__init__.py,sha256={digest},{len(body)}\n"
                                 "pkg-1.0.dist-info/RECORD,,\n")
    dist = metadata.PathDistribution(info)
    assert changed_files(dist, "pkg") == (1, [])
    (site / "pkg" / "__init__.py").write_bytes(b"x = 2  # patched\n")
    assert changed_files(dist, "pkg") == (1, ["pkg/__init__.py"])
