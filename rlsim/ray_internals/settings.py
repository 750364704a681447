"""The names of the settings the annex sets or reads: Ray's, which its C++ reads from the
environment as ``RAY_<name>``, and rlsim's own, which choose Ray's plain path or allow an open
cluster.

Names only, importing nothing: every module of the annex takes a setting's name from here.
"""

from __future__ import annotations

# The settings (RAY_<name>, read by Ray's C++ from the environment) each capability sets
HEALTH_FLAGS = ("RAY_health_check_initial_delay_ms", "RAY_health_check_period_ms",
                "RAY_health_check_timeout_ms", "RAY_health_check_failure_threshold")
QUIET_FLAGS = ("RAY_enable_metrics_collection",)
CONNECT_FLAGS = ("RAY_raylet_client_connect_timeout_milliseconds",
                 "RAY_raylet_client_num_connect_attempts")
NO_IDLE_FLAGS = ("RAY_enable_worker_prestart", "RAY_prestart_worker_first_driver")
PRELOAD_FLAGS = ("RAY_preload_python_modules",)
RECONNECT_FLAGS = ("RAY_gcs_rpc_server_reconnect_timeout_s",)
ALL_FLAGS = (*HEALTH_FLAGS, *QUIET_FLAGS, *CONNECT_FLAGS, *NO_IDLE_FLAGS, *PRELOAD_FLAGS,
             *RECONNECT_FLAGS, "RAY_AUTH_MODE")

PLAIN_VAR = "RLSIM_RAY_PLAIN"  # "all" or capability names: take Ray's plain path for those
# Root may start a cluster no token protects only when the user says so (see `auth_refusal`).
ALLOW_OPEN_VAR = "RLSIM_ALLOW_UNAUTHENTICATED"
