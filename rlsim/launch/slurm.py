"""The Slurm launcher ``rlsim launch slurm`` writes: one sbatch script that starts Ray on the job's
nodes, waits (bounded) until all of them joined with their GPUs, runs ``rlsim doctor`` and the
scenarios with ``--backend real`` on the head, keeps the report in a shared directory, stops Ray
everywhere (also when the job fails or is cancelled) and exits with the scenarios' status. Each
node's ``ray start`` output goes to ``ray-<node>.log`` beside the report.

Each node's address is its ``NodeAddr`` from ``scontrol show node``: the address Slurm itself
reaches it at. Launch scripts that take ``hostname --ip-address`` inside the batch script get the
first node's address for every node (the batch script runs on the first node only), or a
loopback address on hosts whose /etc/hosts maps the name to 127.0.1.1.
"""

from __future__ import annotations

from rlsim.launch.model import Launch, head_steps

TEMPLATE = r"""#!/bin/bash
# Written by `rlsim launch slurm`: Ray on {nodes} node(s) x {gpus} GPU(s), then rlsim's doctor and
# scenarios with --backend real on the head. Submit with: sbatch {name}
#SBATCH --job-name=rlsim-acceptance
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
{gpu_line}#SBATCH --time={time}
#SBATCH --output=%x-%j.out
set -uo pipefail

# the Python rlsim and Ray are installed in, the same path on every node
PY={python}
RAY="$(dirname "$(command -v "$PY")")/ray"
PORT={port}
# a directory every node shares: the report and Ray's token for this job live here
REPORT_ROOT={report_dir}
REPORT="$REPORT_ROOT/$SLURM_JOB_ID"
# pyxis options that run every step in the container image (--image); empty: on the host
IN=({container})
mkdir -p "$REPORT"

mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
# a node's address as Slurm reaches it (NodeAddr; a name there is resolved to its IPv4 address)
addr() {{
  local a
  a=$(scontrol show node "$1" | sed -n 's/.*NodeAddr=\([^ ]*\).*/\1/p')
  getent ahostsv4 "$a" | awk 'NR==1 {{print $1}}' | grep . || echo "$a"
}}
HEAD=${{NODES[0]}}
HEAD_IP=$(addr "$HEAD")
# Token auth, as rlsim's own clusters: one token for this job, readable by its user only
export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$REPORT/.ray-auth-token" RAY_USAGE_STATS_ENABLED=0
(umask 077; od -An -tx1 -N32 /dev/urandom | tr -d ' \n' > "$RAY_AUTH_TOKEN_PATH")

# Ray runs as one job step per node (`ray start --block`), under a temp dir of this job's own:
# stopping it ends the steps, then every process naming that dir on each node, and nothing else
# (not `ray stop`, which ends every Ray process of the host, another job's too).
RAY_TMP=/tmp/ray-rlsim-$SLURM_JOB_ID
STEPS=()
stop_ray() {{
  echo "rlsim launch: stopping Ray on every node"
  srun --overlap --nodes={nodes} --ntasks={nodes} --ntasks-per-node=1 ${{IN[@]+"${{IN[@]}}"}} \
    "$PY" -m rlsim.launch.stop "$RAY_TMP"
  kill -TERM "${{STEPS[@]}}" 2>/dev/null  # the `ray start` steps, if still there
  wait
}}
trap stop_ray EXIT

echo "rlsim launch: head $HEAD at $HEAD_IP:$PORT, nodes: ${{NODES[*]}}"
on() {{
  local node=$1; shift
  srun --overlap --nodes=1 --ntasks=1 -w "$node" ${{IN[@]+"${{IN[@]}}"}} "$@"
}}
on "$HEAD" "$RAY" start --head --block --node-ip-address="$HEAD_IP" --port="$PORT" \
  --temp-dir="$RAY_TMP" --num-gpus={gpus} > "$REPORT/ray-$HEAD.log" 2>&1 &
STEPS+=($!)
for node in "${{NODES[@]:1}}"; do
  on "$node" "$RAY" start --block --address="$HEAD_IP:$PORT" --node-ip-address="$(addr "$node")" \
    --num-gpus={gpus} > "$REPORT/ray-$node.log" 2>&1 &
  STEPS+=($!)
done

# bounded: every node alive in ray.nodes() with its GPUs, or the job ends saying which are missing;
# then the doctor and the scenarios, each a job step on the head
{steps}
exit $status
"""


def script(launch: Launch, name: str) -> str:
    gpu_line = f"#SBATCH --gres=gpu:{launch.gpus_per_node}\n" if launch.gpus_per_node else ""
    container = _q(f"--container-image={launch.image}") + " " + _q(
        f"--container-mounts={launch.report_dir}:{launch.report_dir}") if launch.image else ""
    return TEMPLATE.format(
        name=name, nodes=launch.nodes, gpus=launch.gpus_per_node, gpu_line=gpu_line,
        time=launch.time, python=_q(launch.python), port=launch.port,
        report_dir=_q(launch.report_dir), container=container,
        steps="\n".join(head_steps(launch, "$HEAD_IP:$PORT", "$REPORT", on_head='on "$HEAD" ')))


def _q(text: str) -> str:
    import shlex

    return shlex.quote(text)
