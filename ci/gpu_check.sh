#!/usr/bin/env bash
# The GPU path on one host with real GPUs: `bash ci/gpu_check.sh OUT` with rlsim installed (its
# `rlsim` on PATH, `python3` the Python it runs on). Every step is bounded and logged; one failing
# step does not stop the next. What it does:
#   1. the collectives two ranks on one GPU can use (ci/gpu_collectives.py: NCCL, then gloo);
#   2. a simulated cluster of 2 nodes x 1 GPU, the host's GPU 0 behind node 1's (node 0's is
#      fake): `rlsim doctor --json` and scenarios/gpu_oom_colocated.yaml with --backend real (a
#      real CUDA allocation takes node 1's GPU; actor rank 1 trains there);
#   3. a cluster of 4 nodes x 8 GPUs, GPU 0 behind all 32 (`--cuda-devices 0`): the reference
#      trainer on one rank (CUDA training over NCCL), then scenarios/node_failure_mid_run.yaml
#      with --backend real --allow-disruptive (a node's raylet killed mid-run; its two ranks
#      share the GPU, over gloo);
#   4. nothing left: no raylet of these clusters, no process holding the GPU.
# OUT gets summary.txt, collectives.json, doctor.json and logs.tgz (every step's log, the reports).
# STEPS (default "collectives oom nodes") picks steps 1, 2 and 3. Exit status: 0 when every step
# passed, 1 otherwise (the summary says which); the clusters are taken down whatever happens.
set -u
STEPS=" ${STEPS:-collectives oom nodes} "
OUT=${1:?usage: ci/gpu_check.sh OUT}
mkdir -p "$OUT"
LOGS=$(mktemp -d)
SUM="$OUT/summary.txt"
export COLUMNS=400 PYTHONUNBUFFERED=1
: >"$SUM"
FAILED=0
trap 'rlsim down gpu-a >/dev/null 2>&1; rlsim down gpu-b >/dev/null 2>&1' EXIT

step() {  # step NAME SECONDS COMMAND...: run bounded, log to LOGS/NAME.log, say rc and time
    local name=$1 limit=$2 t0 rc
    shift 2
    t0=$(date +%s%N)
    timeout -k 10 "$limit" "$@" >"$LOGS/$name.log" 2>&1
    rc=$?
    [ $rc = 0 ] || FAILED=$((FAILED + 1))
    printf '%-28s rc=%-3s %6d ms\n' "$name" "$rc" $((($(date +%s%N) - t0) / 1000000)) \
        | tee -a "$SUM"
    return $rc
}

up() {  # up NAME ARGS...: a detached cluster; its driver settings exported here
    step "cluster-$1" 180 rlsim cluster --name "$@" --detach || return 1
    eval "$(grep '^export ' "$LOGS/cluster-$1.log")"
    echo "  $1: RAY_ADDRESS=$RAY_ADDRESS" | tee -a "$SUM"
}

verdict() {  # a run's verdict and each check's line into the summary, and where it trained
    grep -E "^ *(PASS|FAIL|SKIP|ERROR|ok |no )" "$LOGS/$1.log" | cut -c1-300 | head -30 \
        | sed 's/^/  /' | tee -a "$SUM"
    find "$LOGS/$2" -name events.jsonl -path '*/run/*' -exec grep -h '"placement"' {} + \
        2>/dev/null | head -2 | cut -c1-900 | tee -a "$SUM"
}

{ nvidia-smi -L; python3 -c "import torch, ray; print('torch', torch.__version__, 'cuda',
torch.version.cuda, 'available', torch.cuda.is_available(), 'ray', ray.__version__)"; } \
    2>&1 | tee -a "$SUM"

[[ $STEPS == *" collectives "* ]] && step collectives 240 python3 ci/gpu_collectives.py "$OUT/collectives.json"

if [[ $STEPS == *" oom "* ]] && up gpu-a --nodes 2 --fake-gpus 1 --node 1:cuda_devices=0; then
    step doctor 120 rlsim doctor --ray-address "$RAY_ADDRESS" --json
    cp "$LOGS/doctor.log" "$OUT/doctor.json"
    step gpu-oom-colocated 300 rlsim run scenarios/gpu_oom_colocated.yaml --backend real \
        --ray-address "$RAY_ADDRESS" --allow-disruptive --report "$LOGS/report-gpu-oom"
    verdict gpu-oom-colocated report-gpu-oom
    step down-gpu-a 120 rlsim down gpu-a
fi

if [[ $STEPS == *" nodes "* ]] && up gpu-b --nodes 4 --fake-gpus 8 --cuda-devices 0; then
    # one rank, the whole GPU: CUDA training over NCCL, as on a real node
    step trainer-one-rank 300 python3 -m trainer --config grpo_tiny total_steps=6 save_freq=3 \
        placement.nnodes=1 "run_dir=$LOGS/trainer-one-rank"
    grep -h '"placement"\|"run_end"' "$LOGS/trainer-one-rank/events.jsonl" 2>/dev/null \
        | cut -c1-700 | tee -a "$SUM"
    step node-failure-mid-run 420 rlsim run scenarios/node_failure_mid_run.yaml --backend real \
        --ray-address "$RAY_ADDRESS" --allow-disruptive --report "$LOGS/report-node-failure"
    verdict node-failure-mid-run report-node-failure
    step down-gpu-b 120 rlsim down gpu-b
fi

sleep 2
{
    echo "left: raylets $(pgrep -c raylet || true), gcs_server $(pgrep -c gcs_server || true)," \
        "processes on the GPU $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)"
} | tee -a "$SUM"
# the logs and reports, not the runs' weights (checkpoints and rollout copies: megabytes each)
tar -czf "$OUT/logs.tgz" -C "$LOGS" --exclude=checkpoints --exclude=rollout --exclude='*.pt' \
    --exclude='*.safetensors' . 2>/dev/null
echo "failed steps: $FAILED" | tee -a "$SUM"
[ "$FAILED" = 0 ]
