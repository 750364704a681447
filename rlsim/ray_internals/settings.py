"""The names of the settings the annex sets or reads: Ray's, which its C++ reads from the
environment as ``RAY_<name>`` and its Python under names of its own, and rlsim's, which choose
Ray's plain path or allow an open cluster.

Names only, importing nothing: every module of the annex, and any module of rlsim that hands one
of these to Ray, takes the setting's name from here.
"""

from __future__ import annotations

# The settings (RAY_<name>, read by Ray's C++ from the environment) each capability sets
HEALTH_FLAGS = ("RAY_health_check_initial_delay_ms", "RAY_health_check_period_ms",
                "RAY_health_check_timeout_ms", "RAY_health_check_failure_threshold")
METRICS_FLAG = "RAY_enable_metrics_collection"
QUIET_FLAGS = (METRICS_FLAG,)
CONNECT_TIMEOUT_FLAG = "RAY_raylet_client_connect_timeout_milliseconds"
CONNECT_ATTEMPTS_FLAG = "RAY_raylet_client_num_connect_attempts"
CONNECT_FLAGS = (CONNECT_TIMEOUT_FLAG, CONNECT_ATTEMPTS_FLAG)
PRESTART_FLAG = "RAY_enable_worker_prestart"
PRESTART_FIRST_DRIVER_FLAG = "RAY_prestart_worker_first_driver"
NO_IDLE_FLAGS = (PRESTART_FLAG, PRESTART_FIRST_DRIVER_FLAG)
PRELOAD_FLAG = "RAY_preload_python_modules"
PRELOAD_FLAGS = (PRELOAD_FLAG,)
RECONNECT_FLAGS = ("RAY_gcs_rpc_server_reconnect_timeout_s",)
AUTH_MODE_VAR = "RAY_AUTH_MODE"  # "token": the cluster checks a token (Ray 2.52 on)
AUTH_TOKEN_PATH_VAR = "RAY_AUTH_TOKEN_PATH"
ALL_FLAGS = (*HEALTH_FLAGS, *QUIET_FLAGS, *CONNECT_FLAGS, *NO_IDLE_FLAGS, *PRELOAD_FLAGS,
             *RECONNECT_FLAGS, AUTH_MODE_VAR)

# An agent forked from the agent zygote has the zygote for its parent. Ray's default watch on
# the raylet compares the agent's parent with RAY_RAYLET_PID and ends an agent whose parent
# differs (five checks, 2 s); with the pipe check the raylet hands each agent a pipe on stdin,
# which the client passes on, and the agent ends when it reads the end of it: the raylet gone.
PIPE_CHECK_VAR = "RAY_enable_pipe_based_agent_to_parent_health_check"
# Set on a node's launcher while Ray builds the raylet: the node's labels as Ray's autoscaler
# sets them for the nodes it launches (user labels may not use Ray's "ray.io/" prefix)
OVERRIDE_LABELS_VAR = "RAY_OVERRIDE_LABELS"
# the ports of the head's metrics servers: the autoscaler monitor's and the dashboard's
AUTOSCALER_METRIC_PORT_VAR = "AUTOSCALER_METRIC_PORT"
DASHBOARD_METRIC_PORT_VAR = "DASHBOARD_METRIC_PORT"
# Set on a process, Ray leaves its CUDA_VISIBLE_DEVICES alone (without it, a process Ray gives
# no GPU sees none): Ray's accelerator code reads it, under a name Ray calls experimental
NOSET_CUDA_VAR = "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"
# the callbacks Ray Train (V2) builds in the driver, by class path: its internal constants'
TRAIN_CALLBACKS_VAR = "RAY_TRAIN_CALLBACKS"

# Ray's settings of its Python that its documentation names
ADDRESS_VAR = "RAY_ADDRESS"  # the cluster Ray's libraries and CLI join (rlsim names it anywhere)
USAGE_STATS_VAR = "RAY_USAGE_STATS_ENABLED"
USE_TLS_VAR = "RAY_USE_TLS"
TRAIN_V2_VAR = "RAY_TRAIN_V2_ENABLED"  # Ray Train's own switch between its V1 and V2 APIs

# Ray's settings that Ray's documentation names: any module of rlsim may name these.
DOCUMENTED = (ADDRESS_VAR, AUTH_MODE_VAR, AUTH_TOKEN_PATH_VAR, USAGE_STATS_VAR, USE_TLS_VAR,
              TRAIN_V2_VAR)
# Every setting of Ray's the annex names that Ray's documentation does not: Ray may rename or
# drop any of them in a release without a word, so only the annex names them, each once, here
# (tests/unit/test_layers.py fails on any other module that names one, and on a setting named
# in the annex that is in neither list).
UNDOCUMENTED = (*HEALTH_FLAGS, *QUIET_FLAGS, *CONNECT_FLAGS, *NO_IDLE_FLAGS, *PRELOAD_FLAGS,
                *RECONNECT_FLAGS, PIPE_CHECK_VAR, OVERRIDE_LABELS_VAR, AUTOSCALER_METRIC_PORT_VAR,
                DASHBOARD_METRIC_PORT_VAR, NOSET_CUDA_VAR, TRAIN_CALLBACKS_VAR)

PLAIN_VAR = "RLSIM_RAY_PLAIN"  # "all" or capability names: take Ray's plain path for those
# Root may start a cluster no token protects only when the user says so (see `auth_refusal`).
ALLOW_OPEN_VAR = "RLSIM_ALLOW_UNAUTHENTICATED"
