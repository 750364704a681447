"""Scenarios that cannot mean what they say, refused when read: ``rlsim validate FILE`` and
``rlsim run FILE`` exit 2 with one line naming the file, the field and the fix, before any
cluster starts. One test per class: a check the trainer's adapter can never satisfy, groups that
put one node on both sides, a cluster both on a substrate and on another backend, an address or
port that is none, a role's rank that is not a number, a GPU the nodes a fault can hit do not
have. Each was accepted (or answered in pydantic's words, or a traceback) before. Run through the
real entry point (``rlsim.commands.main``) in this process."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsim import commands as cli
from rlsim.scenario.loader import load

REFERENCE = "trainer: {config: grpo_tiny}\n"


def story(tmp_path: Path, cluster: str = "{nodes: 3}", fault: str = "",
          expect: str = "[{completes: {}}]") -> Path:
    """A scenario of the reference trainer on ``cluster``, with one fault at step 3."""
    faults = f"faults:\n  - at: {{step: 3}}\n    {fault}\n" if fault else ""
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\ncluster: {cluster}\n{REFERENCE}{faults}expect: {expect}\n")
    return path


def refused(tmp_path: Path, monkeypatch, capsys, path: Path, *words: str) -> str:
    """``validate`` and ``run`` both exit 2 with the same one line, naming ``words``; nothing
    written."""
    monkeypatch.setenv("RLSIM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.chdir(tmp_path)
    before = set(tmp_path.rglob("*"))
    texts = []
    for argv in (["validate", str(path)], ["run", str(path), "--report", str(tmp_path / "r")]):
        with pytest.raises(SystemExit) as e:
            cli.main(argv)
        out = capsys.readouterr()
        text = out.out + out.err
        assert e.value.code == 2, text
        assert "Traceback" not in text and len(text.strip().splitlines()) == 1, text
        assert text.startswith(str(path)), text
        for word in words:
            assert word in text, text
        texts.append(text)
    assert texts[0] == texts[1]
    assert set(tmp_path.rglob("*")) == before
    return texts[0]


def test_a_check_the_trainer_can_never_satisfy_is_refused(tmp_path, monkeypatch, capsys):
    """The reference trainer never replaces a worker in place (a lost rank restarts it whole):
    ``replacements: {min: 1}`` could only fail, ``{max: 0}`` only pass."""
    for bounds in ("{min: 1}", "{max: 0}"):
        path = story(tmp_path, expect=f"[{{completes: {{}}}}, {{replacements: {bounds}}}]")
        refused(tmp_path, monkeypatch, capsys, path, ":4: expect[1]",
                "check replacements needs worker_replaced",
                "the reference trainer never replaces a worker in place", "drop the check")
    path = story(tmp_path, fault="kill_node: {node: 1}")
    path.write_text(path.read_text().replace("at: {step: 3}", "at: {event: worker_replaced}"))
    refused(tmp_path, monkeypatch, capsys, path, "faults[0].at.event",
            "never logs an event 'worker_replaced'")


@pytest.mark.parametrize("fault,words", [
    ('partition: {groups: [["actor"], ["actor:1"]]}',
     ["faults[0].partition.groups: groups 1 and 2 share a node",
      "actor:1 is a rank of actor, which group 1 names whole", "put actor:1 in group 1"]),
    ('partition: {groups: [["rollout:0", 2], ["rollout"]]}',
     ["faults[0].partition.groups: groups 1 and 2 share a node", "rollout:0 is a rank of rollout",
      "which group 2 names whole"]),
    ('flap_link: {groups: [["actor"], ["actor:1"]], period_s: 2, down_s: 1}',
     ["faults[0].flap_link.groups: groups 1 and 2 share a node"]),
    ('partition: {groups: [["actor:1"], ["actor:01"]]}',
     ["faults[0].partition.groups: 'actor:01' is named twice"]),
])
def test_groups_that_put_one_node_on_both_sides_are_refused(tmp_path, monkeypatch, capsys,
                                                             fault, words):
    refused(tmp_path, monkeypatch, capsys, story(tmp_path, fault=fault), ":6:", *words)


@pytest.mark.parametrize("groups", ['[["actor", "actor:1"], [2]]', '[[1], ["actor"]]',
                                    '[["actor:0"], ["actor:1"]]', '[["actor"], ["rollout:1"]]'])
def test_groups_that_may_be_apart_are_taken(tmp_path, groups):
    """What only the placement tells (an index and a role) is left to the fault's own check when
    it fires (FaultContext.groups), never refused on a guess."""
    assert load(story(tmp_path, fault=f"partition: {{groups: {groups}}}")).faults


def test_a_substrate_with_another_backend_is_refused(tmp_path, monkeypatch, capsys):
    """A cluster on a substrate runs its nodes as processes there: ``backend: docker`` beside
    ``on`` was dropped without a word."""
    path = story(tmp_path, cluster='{nodes: 2, backend: docker, on: "10.0.0.1:6379"}')
    refused(tmp_path, monkeypatch, capsys, path, ":2: cluster: backend: docker with on",
            "fix: drop backend")


@pytest.mark.parametrize("address,words", [
    ("abc", "'abc' is not HOST:PORT"),
    (":6379", "':6379' is not HOST:PORT"),
    ("...:6379", "'...' is not a host name"),
    ("head..local:6379", "'head..local' is not a host name"),
    ("10.0.0.1:0", "port 0 is outside 1-65535"),
    ("10.0.0.1:99999", "port 99999 is outside 1-65535"),
    ("[::1]:6379", "an IPv6 host"),
])
def test_a_substrate_address_that_is_none_is_refused(tmp_path, monkeypatch, capsys, address,
                                                     words):
    path = story(tmp_path, cluster=f'{{nodes: 2, on: "{address}"}}')
    refused(tmp_path, monkeypatch, capsys, path, ":2: cluster.on: ", words,
            "fix: give the substrate's GCS address as HOST:PORT, e.g. on: 10.0.0.1:6379")
    monkeypatch.setenv("COLUMNS", "400")
    with pytest.raises(SystemExit) as e:  # the same address by hand: refused before any socket
        cli.main(["cluster", "--on", address, "--name", "meaning"])
    out = capsys.readouterr()
    text = out.out + out.err
    assert e.value.code == 2 and "Traceback" not in text, text
    assert f"rlsim cluster: --on {words}" in text or words in text, text
    assert "fix: give the substrate's GCS address as HOST:PORT, e.g. --on 10.0.0.1:6379" in text
    assert not (tmp_path / "home").exists()


@pytest.mark.parametrize("fault,words", [
    ('partition: {groups: [["actor:x"]]}',
     "faults[0].partition.groups.0.0: 'actor:x': role:rank needs a whole number"),
    ('partition: {groups: [["actor:"], [1]]}', "'actor:': role:rank needs a whole number"),
    ('block_port: {node: 1, port: gcs, sources: ["rollout:one"]}',
     "faults[0].block_port.sources.0: 'rollout:one': role:rank needs a whole number"),
    ('degrade_link: {nodes: ["actor:1.5"], delay_ms: 50}',
     "faults[0].degrade_link.nodes.0: 'actor:1.5': role:rank needs a whole number"),
    ('partition: {groups: [["1"]]}', "'1' is quoted: write the node index as a number (1)"),
    ("kill_node: {node: head}", "faults[0].kill_node.node: 'head' is not a node; give a node "
                                "index (1) or random"),
])
def test_a_node_or_rank_that_is_none_is_said_in_words(tmp_path, monkeypatch, capsys, fault,
                                                      words):
    text = refused(tmp_path, monkeypatch, capsys, story(tmp_path, fault=fault), words)
    assert "constrained" not in text and "Input should be" not in text, text
    if "role:rank" in words:
        assert "e.g. actor:1" in text or "e.g. rollout:1" in text, text


@pytest.mark.parametrize("cluster,fault,words", [
    ("{nodes: 3, gpus_per_node: 1}", "gpu_lost: {node: random, gpu: 5}",
     "faults[0].gpu_lost.gpu: node: random may pick node 1, which has 1 GPU(s), ids 0-0: name a "
     "GPU below 1"),
    ("{nodes: 3, gpus_per_node: 2, node: {2: {gpus: 0}}}", "gpu_lost: {node: random, gpu: 0}",
     "node: random may pick node 2, which has no GPU: name a node with GPUs"),
    ("{nodes: 3, gpus_per_node: 1}", "gpu_lost: {role: actor, gpu: 3}",
     "faults[0].gpu_lost.gpu: actor rank 0 runs on a node other than the head, and none of those "
     "has a GPU 3"),
])
def test_a_gpu_the_fault_may_not_find_is_refused(tmp_path, monkeypatch, capsys, cluster, fault,
                                                 words):
    refused(tmp_path, monkeypatch, capsys, story(tmp_path, cluster, fault), ":6:", words)


def test_a_gpu_every_node_it_may_hit_has_is_taken(tmp_path):
    """The head's GPUs do not count for ``random`` (it never picks the head)."""
    cluster = "{nodes: 3, gpus_per_node: 2, node: {0: {gpus: 0}, 1: {gpus: 4}}}"
    assert load(story(tmp_path, cluster, "gpu_lost: {node: random, gpu: 1}")).faults
    assert load(story(tmp_path, cluster, "gpu_lost: {role: actor, gpu: 3}")).faults
