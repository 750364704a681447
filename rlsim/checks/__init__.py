"""Checks: judge a finished scenario from its history alone (Jepsen's checker), never during it.

The one registry of checks: each is a parameter model and a judge side by side, registered with
:func:`check`, with an optional scalar shorthand (``restarts: 1`` for ``restarts: {min: 1, max:
1}``). The scenario schema validates ``expect`` entries against :data:`CHECKS`. Each judge returns
a :class:`Verdict`: whether the expectation held, a sentence in the scenario's words, the figure
measured (seconds, steps) and the timeline lines that show it.

The registry, the decorator and what several checks read of a history are in ``base``; the
checks, one module per family: ``outcome`` (how the run ended, its steps, restarts and
placements), ``timing`` (seconds to detect, to recover, without a step; throughput by window),
``baseline`` (against the fault-free twin, weights included), ``reach`` (did each fault land),
``events``, ``leaks`` and ``doctor``; ``judging`` runs a scenario's checks. Each family module's
docstring opens with this one's first line: the scenario schema describes a check whose judge
has no docstring by its module's first paragraph (:mod:`rlsim.scenario.jsonschema`).

Adding a check: a judge and its parameters in the module of its family (or a package's own),
and its entry point in the group ``rlsim.checks``.
"""

from rlsim.checks.base import CHECKS, FIGURES, Check, check, stalled_said
from rlsim.checks.baseline import MAX_WEIGHTS, MatchesBaseline, matches_baseline
from rlsim.checks.blame import Blamed, blamed
from rlsim.checks.doctor import DoctorClean, DoctorWarns, doctor_clean, doctor_warns
from rlsim.checks.events import Event, event
from rlsim.checks.goodput import Goodput, goodput
from rlsim.checks.judging import judge
from rlsim.checks.leaks import NoLeaks, no_leaks
from rlsim.checks.outcome import (
    Completes,
    Fails,
    FinalStep,
    PlacedOn,
    Refused,
    Replacements,
    Restarts,
    ResumedFromStep,
    RewardImproves,
    completes,
    fails,
    final_step,
    placed_on,
    refused,
    replacements,
    restarts,
    resumed_from_step,
    reward_improves,
)
from rlsim.checks.reach import NO_TRAINER_ACTOR, REACH_NOUNS, FaultsLanded, faults_landed
from rlsim.checks.timing import (
    OWN_AFTER_MIN,
    ThroughputWithin,
    WithinS,
    detected_within_s,
    own_ratio,
    progress_within_s,
    recovered_within_s,
    step_seconds,
    throughput_within,
    window_ratios,
)

__all__ = [
    "Blamed", "blamed", "Goodput", "goodput",
    "CHECKS", "FIGURES", "MAX_WEIGHTS", "NO_TRAINER_ACTOR", "OWN_AFTER_MIN", "REACH_NOUNS",
    "Check", "Completes", "DoctorClean", "DoctorWarns", "Event", "Fails", "FaultsLanded",
    "FinalStep", "MatchesBaseline", "NoLeaks", "PlacedOn", "Refused", "Replacements", "Restarts",
    "ResumedFromStep", "RewardImproves", "ThroughputWithin", "WithinS", "check", "completes",
    "detected_within_s", "doctor_clean", "doctor_warns", "event", "fails", "faults_landed",
    "final_step", "judge", "matches_baseline", "no_leaks", "own_ratio", "placed_on",
    "progress_within_s", "recovered_within_s", "refused", "replacements", "restarts",
    "resumed_from_step", "reward_improves", "stalled_said", "step_seconds", "throughput_within",
    "window_ratios",
]
