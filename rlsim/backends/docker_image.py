"""The docker backend's node image, built here with no registry: ``rlsim image build``.

Choice: the image is a skeleton rootfs (empty directories and the host's top-level symlinks such as
``bin -> usr/bin``, a few KB, made with ``docker import``), and a node container runs the host's own
software bind-mounted read-only at the same paths: ``/usr`` (and ``/bin``, ``/lib*``, ``/sbin``
when they are real directories), ``/etc``, the Python installation, its virtualenv and the folders
that hold the installed rlsim and reference trainer (site-packages for a wheel; the source folders
for an editable install). So a container node runs exactly the Ray, torch and trainer the host
runs, nothing is copied or downloaded, and building takes a second. The price: the image only
works on this host (or one laid out the same way); that is what a rehearsal on one machine
needs. A node with a
different Python or Ray is made by mounting another environment over the venv (see the backend).
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
import tarfile
from pathlib import Path

IMAGE_REPO = "rlsim-node"
SKELETON_DIRS = ("dev", "proc", "sys", "tmp", "run", "root", "home", "var/tmp", "mnt")
TOP_LEVEL = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


def host_mounts() -> list[str]:
    """Host paths a node container mounts read-only, at the same path, outermost first."""
    paths = ["/usr", "/etc"]
    paths += [f"/{name}" for name in TOP_LEVEL
              if os.path.isdir(f"/{name}") and not os.path.islink(f"/{name}")]
    # the site-packages on the import path beside the venv's own: a venv whose .pth file adds
    # another environment's (a project pinning its own Ray over shared packages) needs both
    sites = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))
             and os.path.isdir(p)]
    for real in sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, *sites,
                                                      *map(str, code_roots()))}, key=len):
        if not any(real == m or real.startswith(m + "/") for m in paths):
            paths.append(real)
    return paths


def code_roots() -> list[Path]:
    """The folders rlsim, its catalogue and the reference trainer are imported from (their
    parents on the import path): what a node needs to see to run them."""
    import importlib.util

    roots = []
    for name in ("rlsim", "rlsim.catalogue", "trainer"):
        spec = importlib.util.find_spec(name)
        for location in (spec.submodule_search_locations or []) if spec else []:
            roots.append(Path(location).resolve().parent)
    return sorted(set(roots))


def rootfs_tar() -> bytes:
    """The skeleton rootfs: directories, the host's top-level symlinks and mount points."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        made: set[str] = set()

        def add_dir(path: str) -> None:
            parts = path.strip("/").split("/")
            for i in range(1, len(parts) + 1):
                sub = "/".join(parts[:i])
                if sub and sub not in made:
                    info = tarfile.TarInfo(sub)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o1777 if sub == "tmp" \
                        else 0o755, 0
                    tar.addfile(info)
                    made.add(sub)

        for name in TOP_LEVEL:
            if os.path.islink(f"/{name}"):
                info = tarfile.TarInfo(name)
                info.type, info.linkname, info.mtime = tarfile.SYMTYPE, os.readlink(f"/{name}"), 0
                tar.addfile(info)
                made.add(name)
        for d in (*SKELETON_DIRS, *host_mounts()):
            add_dir(d)
    return buf.getvalue()


def image_tag() -> str:
    """``rlsim-node:<content hash>``: a changed layout (another venv path) is another image."""
    return f"{IMAGE_REPO}:{hashlib.sha256(rootfs_tar()).hexdigest()[:12]}"


def build(client) -> str:
    """Import the image if this engine does not have it yet; returns its tag."""
    import docker.errors

    tag = image_tag()
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        repo, version = tag.split(":")
        client.api.import_image_from_data(rootfs_tar(), repository=repo, tag=version)
    return tag
