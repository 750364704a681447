"""The node image's skeleton rootfs (pure: no engine needed)."""

import hashlib
import io
import os
import re
import sys
import tarfile
from pathlib import Path

from rlsim.backends.docker import interpreter_problem
from rlsim.backends.docker_image import code_roots, host_mounts, image_tag, rootfs_tar


def test_skeleton_has_mount_points_for_the_host_environment_and_no_files():
    with tarfile.open(fileobj=io.BytesIO(rootfs_tar())) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert all(m.isdir() or m.issym() for m in members.values())  # nothing copied from the host
    for path in host_mounts():
        assert path.strip("/") in members, path
    assert members["tmp"].mode == 0o1777
    for name in ("bin", "lib"):
        if os.path.islink(f"/{name}"):
            assert members[name].issym() and members[name].linkname == os.readlink(f"/{name}")


def test_mounts_cover_python_venv_and_project_read_only_once():
    mounts = host_mounts()
    for p in (sys.base_prefix, sys.prefix, *map(str, code_roots())):
        real = os.path.realpath(p)
        assert any(real == m or real.startswith(m + "/") for m in mounts)
    assert len(mounts) == len(set(mounts))


def test_tag_is_a_content_hash_stable_across_calls(monkeypatch, tmp_path):
    from rlsim.backends import docker_image

    tag = image_tag()
    # the hash of the rootfs the image is imported from, worked out here
    assert tag == "rlsim-node:" + hashlib.sha256(rootfs_tar()).hexdigest()[:12]
    # the same layout is the same image: another call, from another working directory
    monkeypatch.chdir(tmp_path)
    assert image_tag() == tag
    # another layout (one more host path mounted: another venv's) is another image
    mounts = host_mounts()
    monkeypatch.setattr(docker_image, "host_mounts", lambda: [*mounts, "/opt/another-venv"])
    other = image_tag()
    assert other != tag and re.fullmatch(r"rlsim-node:[0-9a-f]{12}", other)
    monkeypatch.setattr(docker_image, "host_mounts", lambda: list(mounts))
    assert image_tag() == tag


def test_another_python_must_exist_differ_and_share_the_minor_version():
    assert "does not run here" in interpreter_problem("/nonexistent/python3")
    assert "the same Python as this environment" in interpreter_problem(sys.executable)


def test_nodes_import_the_code_this_process_imported_not_the_venvs(monkeypatch, tmp_path):
    """A checkout on PYTHONPATH (another revision beside an editable install) is put first on a
    node container's path; code in site-packages needs nothing; another interpreter over this
    environment gets its site-packages after it."""
    import site

    from rlsim.backends import docker

    sites = site.getsitepackages()
    monkeypatch.setattr(docker, "code_roots", lambda: [tmp_path, Path(sites[0])])
    assert docker.node_pythonpath() == str(tmp_path)
    assert docker.node_pythonpath(other_python=True).split(os.pathsep) == [str(tmp_path), *sites]
    monkeypatch.setattr(docker, "code_roots", lambda: [Path(sites[0])])
    assert docker.node_pythonpath() is None
