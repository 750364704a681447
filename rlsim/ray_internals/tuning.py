"""Ray's settings rlsim tunes, and a driver's private argument to ``ray.init``, each given only
where the installed Ray reads it: a setting Ray does not know is ignored without a word, so one
left out is said (its capability not in force) instead of silently doing nothing.
"""

from __future__ import annotations

from rlsim.ray_internals.answers import available
from rlsim.ray_internals.settings import HEALTH_FLAGS, RECONNECT_FLAGS


def flag_env(capability: str, values: dict[str, str]) -> dict[str, str]:
    """``values`` (``RAY_<setting>`` -> value) where ``capability`` is in force, else nothing:
    a setting Ray does not read is never set, so it cannot silently do nothing."""
    return dict(values) if available(capability) else {}


def health_check_env(initial_delay_ms: int, period_ms: int, timeout_ms: int,
                     failure_threshold: int) -> dict[str, str]:
    """The GCS's health checks of every node, as rlsim tunes them (fast_health_checks)."""
    return flag_env("fast_health_checks", dict(zip(HEALTH_FLAGS, map(str, (
        initial_delay_ms, period_ms, timeout_ms, failure_threshold)), strict=True)))


def init_from(route: str) -> dict[str, str]:
    """What ``ray.init`` takes for a driver to join from ``route`` (this machine's address on the
    way to the cluster's GCS): Ray's private ``_node_ip_address`` where driver_address is in
    force; nothing on Ray's plain path, where Ray takes the address of this machine's hostname."""
    return {"_node_ip_address": route} if available("driver_address") else {}


def driver_env(gcs_reconnect_timeout_s: float) -> dict[str, str]:
    """What a trainer's driver sets before it imports Ray: how long it waits for a lost GCS."""
    return flag_env("driver_gcs_timeout",
                    {RECONNECT_FLAGS[0]: str(int(gcs_reconnect_timeout_s))})
