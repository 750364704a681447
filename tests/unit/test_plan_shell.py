"""rlsim plan reads a pasted script's launch line as bash would, without running it: the
script's variables, defaults, arrays and arithmetic expanded; what it cannot know left as
written."""

from __future__ import annotations

import shlex

from rlsim.plan.shell import launch_line

ENTRY = ("verl.trainer.main_ppo",)


def argv(script: str) -> list[str]:
    return shlex.split(launch_line(script, ENTRY), comments=True)


def test_defaults_arithmetic_and_positionals_expand():
    script = """
set -x
ENGINE=${1:-vllm}
NNODES=${NNODES:-2}
max_prompt_length=$((1024 * 2))
max_response_length=$((1024 * 8))
budget=$(((max_prompt_length + max_response_length) * 2))
python3 -m verl.trainer.main_ppo trainer.nnodes="${NNODES}" rollout.name=$ENGINE \\
    len=$budget x=$((max_prompt_length / 3)) $@
"""
    assert argv(script)[3:] == ["trainer.nnodes=2", "rollout.name=vllm", "len=20480",
                                "x=682", "$@"]


def test_arrays_expand_word_by_word_with_their_comments_dropped():
    script = """
ARGS=(
   --actor.num_nodes 1
   # --reward.model_name_or_path ${REWARD}
   --data.path "/data/my set"
)
python3 -m verl.trainer.main_ppo ${ARGS[@]} --more
"""
    assert argv(script)[3:] == ["--actor.num_nodes", "1", "--data.path", "/data/my set",
                                "--more"]


def test_what_the_script_cannot_tell_stays_as_written():
    script = """
TP=$(nvidia-smi -L | wc -l)
python3 -m verl.trainer.main_ppo tp=$TP gen=$GEN_TP quoted='$HOME' home=${HOME_DIR}
"""
    assert argv(script)[3:] == ["tp=$TP", "gen=$GEN_TP", "quoted=$HOME", "home=${HOME_DIR}"]


def test_huge_or_odd_arithmetic_is_not_evaluated():
    script = "N=$((9**99999999))\npython3 -m verl.trainer.main_ppo n=$N m=$((1/0))\n"
    assert argv(script)[3:] == ["n=$((9**99999999))", "m=$((1/0))"]
