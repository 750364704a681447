"""Every use rlsim makes of Ray's private surface, named: what each capability gives, the path rlsim
takes without it (Ray's plain path), and the probe of the installed Ray's files that says whether
it can be used.

A capability marked ``required`` has no plain path; one marked ``acceleration`` only saves time
(``RLSIM_RAY_PLAIN=all`` turns every such one off). Whether each is in force is answered by
:mod:`.answers`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlsim.ray_internals.probes import (
    Probe,
    all_of,
    any_of,
    compiled_in,
    flags,
    has_params,
    has_text,
    in_function,
    leads_with,
    proto,
    python_forkserver,
)
from rlsim.ray_internals.releases import TOKEN_AUTH_SINCE
from rlsim.ray_internals.settings import (
    ALLOW_OPEN_VAR,
    AUTH_MODE_VAR,
    CONNECT_FLAGS,
    HEALTH_FLAGS,
    NO_IDLE_FLAGS,
    PIPE_CHECK_VAR,
    PRELOAD_FLAGS,
    QUIET_FLAGS,
    RECONNECT_FLAGS,
    TRAIN_CALLBACKS_VAR,
)


@dataclass(frozen=True)
class Capability:
    """One use of Ray's private surface: what it buys, the path rlsim takes without it, and a
    probe that says why it cannot be used (None: it can)."""

    name: str
    gives: str
    plain: str
    probe: Probe = field(repr=False)
    required: bool = False  # no plain path: rlsim cannot run without it
    # only speed: Ray's plain path gives the same verdicts, slower (RLSIM_RAY_PLAIN=all)
    acceleration: bool = False


@dataclass(frozen=True)
class Status:
    name: str
    available: bool
    why: str  # why not, where not available
    gives: str
    plain: str
    required: bool

    def line(self) -> str:
        return (f"{self.name}: in force ({self.gives})" if self.available else
                f"{self.name}: plain path ({self.plain}), because {self.why}")


AUTH_CLIENT = "_private/authentication/grpc_authentication_client_interceptor.py"

CAPABILITIES: tuple[Capability, ...] = (
    Capability(
        "node_start", "nodes started in-process through Ray's Node class, with every port of the "
        "node's own block", "none: rlsim cannot start a simulated node",
        all_of(has_params("_private/parameter.py", "RayParams.__init__", "node_ip_address",
                            "num_gpus", "resources", "labels", "temp_dir", "node_manager_port",
                            "object_manager_port", "metrics_agent_port",
                            "dashboard_agent_listen_port", "runtime_env_agent_port",
                            "metrics_export_port", "min_worker_port", "max_worker_port",
                            "gcs_server_port", "include_dashboard", "dashboard_port",
                            "gcs_address", "include_log_monitor"),
                has_params("_private/node.py", "Node.__init__", "ray_params", "head",
                            "shutdown_at_exit", "spawn_reaper")),
        required=True),
    Capability(
        "gcs_reads", "the GCS's node, actor, placement-group and job tables read without a "
        "driver", "none: rlsim cannot watch a cluster",
        all_of(has_params("_private/state.py", "GlobalState._initialize_global_state",
                            "gcs_options"),
                has_params("_private/state.py", "GlobalState.node_table", "self"),
                has_params("_private/state.py", "GlobalState.actor_table", "actor_id"),
                has_params("_private/state.py", "GlobalState.job_table", "self"),
                any_of(has_params("_private/state.py", "GlobalState._connect_and_get_accessor",
                                    "self"),
                        has_params("_private/state.py", "GlobalState._check_connected",
                                    "self")),
                proto("gcs_pb2.py", "ActorTableData", "function_descriptor", "is_detached"),
                proto("gcs_pb2.py", "PlacementGroupTableData", "creator_job_id",
                       "creator_actor_id")),
        required=True),
    Capability(
        "token_auth", "the cluster refuses any process without its token (RAY_AUTH_MODE=token)",
        f"an unauthenticated cluster (Ray has token auth from {TOKEN_AUTH_SINCE}): root needs "
        f"{ALLOW_OPEN_VAR}=1 to start one",
        all_of(has_text(AUTH_CLIENT, "def _get_authentication_metadata_tuple"),
                flags(AUTH_MODE_VAR))),
    Capability(
        "auth_reread", "a process that imported Ray before it was given the token settings "
        "still presents the token (Ray's config read again, as Ray does when it turns token auth "
        "on for its own process)", "such a process is refused by the cluster: give it the settings "
        "before it imports Ray (rlsim.ray_internals.export_auth_env)",
        all_of(compiled_in("ray._raylet.Config.initialize"),
                has_text("_private/authentication/authentication_utils.py",
                          "get_authentication_mode", "AuthenticationMode"))),
    Capability(
        "driver_address", "a driver of a substrate joins it from the address that routes to the "
        "substrate's GCS", "Ray picks the driver's address from this machine's hostname (on a "
        "machine whose hostname names loopback, the actors it owns die at once: their workers "
        "cannot reach it)",
        in_function("_private/worker.py", "init", 'kwargs.pop("_node_ip_address"')),
    Capability(
        "fast_health_checks", "a dead node declared dead in about a second (health checks "
        "every 300 ms)", "Ray's default health checks (a dead node seen after about 12 s)",
        flags(*HEALTH_FLAGS)),
    Capability(
        "quiet_nodes", "no metrics exporters (a node registers 0.7 s sooner)",
        "Ray's metrics collection on every node", flags(*QUIET_FLAGS),
        acceleration=True),
    Capability(
        "fast_local_connect", "a node's processes retry their raylet's socket every 50 ms",
        "Ray's 1 s between tries", flags(*CONNECT_FLAGS),
        acceleration=True),
    Capability(
        "no_idle_workers", "no idle workers forked ahead of demand while nodes start",
        "Ray's idle workers, one per CPU, at each node's start", flags(*NO_IDLE_FLAGS),
        acceleration=True),
    Capability(
        "preload_modules", "workers import the trainer's heavy modules before they register",
        "each actor imports them when it starts", flags(*PRELOAD_FLAGS),
        acceleration=True),
    Capability(
        "driver_gcs_timeout", "a driver whose head is gone exits after the trainer's "
        "gcs_reconnect_timeout_s", "Ray's 60 s before a driver gives up on its GCS",
        flags(*RECONNECT_FLAGS)),
    Capability(
        "registration_poll", "a node's start returns as soon as the GCS lists it (polled every "
        "20 ms)", "Ray's wait, which asks again a whole second after a miss",
        all_of(has_params("_private/services.py", "get_node", "gcs_address", "node_id"),
                has_params("_private/services.py", "_get_gcs_client_options",
                            "gcs_server_address")),
        acceleration=True),
    Capability(
        "no_api_server", "a head without the dashboard starts no dashboard process at all",
        "Ray's minimal dashboard process on the head (0.9 s)",
        has_params("_private/node.py", "Node.start_api_server", "include_dashboard",
                    "raise_on_failure"),
        acceleration=True),
    Capability(
        "dashboard_beside", "the head's dashboard starts beside the nodes: its raylet and the "
        "other nodes no longer wait for the dashboard's URL (the cluster is ready once both are)",
        "every node waits for the head's dashboard to publish its URL (3 s here)",
        all_of(has_params("_private/node.py", "Node.start_api_server", "include_dashboard",
                            "raise_on_failure"),
                has_text("_private/node.py",
                          "self._webui_url, process_info = ray._private.services.start_api_server(",
                          "webui=self._webui_url"),
                leads_with("_private/services.py", "start_ray_process", "command",
                            "process_type"),
                in_function("_private/services.py", "start_api_server",
                             "ray_constants.PROCESS_TYPE_DASHBOARD")),
        acceleration=True),
    Capability(
        "worker_setup", "workers exec'd straight into Ray's default_worker.py (0.4 s of CPU "
        "saved each), forked from one import where a zygote runs",
        "Ray's own setup_worker.py for every worker, no zygote",
        all_of(has_params("_private/parameter.py", "RayParams.__init__", "setup_worker_path"),
                has_text("_private/workers/setup_worker.py", "--serialized-runtime-env-context",
                          "--language")),
        acceleration=True),
    Capability(
        "forked_agents", "each node's dashboard and runtime-env agents forked from one import",
        "each agent imports Ray for itself (0.5 s of CPU each, two a node)",
        all_of(leads_with("_private/services.py", "start_ray_process", "command",
                            "process_type"),
                has_text("_private/ray_constants.py", "PROCESS_TYPE_RAYLET"),
                in_function("_private/services.py", "start_raylet",
                             '"--dashboard_agent_command={}"',
                             '"--runtime_env_agent_command={}"'),
                has_text("dashboard/consts.py",
                          PIPE_CHECK_VAR),
                has_text("_private/runtime_env/agent/main.py", "create_check_raylet_task"),
                has_text("dashboard/agent.py", "create_check_raylet_task")),
        acceleration=True),
    Capability(
        "forked_dashboard", "the head's dashboard forked from the agents' import, where Ray's "
        "dashboard modules were imported once (with forked_agents)",
        "the dashboard imports Ray and its modules for itself (1.5 s of the head's start here)",
        all_of(leads_with("_private/services.py", "start_ray_process", "command",
                            "process_type"),
                in_function("_private/services.py", "start_api_server",
                             "ray_constants.PROCESS_TYPE_DASHBOARD", '"dashboard.py"',
                             "unbuffered=False"),
                has_text("dashboard/dashboard.py", 'if __name__ == "__main__":'),
                in_function("dashboard/utils.py", "get_all_modules",
                             "pkgutil.walk_packages", "ray.dashboard.modules.__path__")),
        acceleration=True),
    Capability(
        "dashboard_forkserver", "the dashboard's modules started from a forkserver forked from "
        "the dashboard as it starts, holding its imports (with forked_dashboard)",
        "Python's forkserver, a fresh interpreter, imports Ray and the dashboard's modules again "
        "before the first module starts (1.1 s of CPU here)",
        all_of(in_function("dashboard/subprocesses/handle.py", "select_start_method",
                             'return "forkserver"'),
                has_text("dashboard/subprocesses/handle.py",
                          'multiprocessing.get_context("forkserver")'),
                python_forkserver),
        acceleration=True),
    Capability(
        "lean_agent", "a node's dashboard agent loads no dashboard modules where the cluster "
        "has no dashboard (1.5 s of CPU a node)", "Ray's full dashboard agent on every node",
        all_of(has_params("dashboard/utils.py", "get_all_modules", "module_type"),
                has_text("dashboard/agent.py", '"--minimal"'),
                leads_with("_private/services.py", "start_ray_process", "command",
                            "process_type"),
                in_function("_private/services.py", "start_raylet",
                             '"--dashboard_agent_command={}"'),
                any_of(has_params("_private/utils.py", "get_dashboard_dependency_error"),
                        has_params("_private/utils.py",
                                    "check_dashboard_dependencies_installed"))),
        acceleration=True),
    Capability(
        "job_address_file", "a Ray Job's supervisor finds its own cluster's GCS (two clusters "
        "on one machine)", "Ray's guess, which may pick another cluster's GCS",
        has_params("_private/utils.py", "write_ray_address", "ray_address", "temp_dir")),
    Capability(
        "warm_workers", "idle workers started on each node ahead of the trainer's actors "
        "(PrestartWorkers)", "the trainer's actors start their workers when placed",
        proto("node_manager_pb2.py", "PrestartWorkersRequest", "keep_alive_duration_secs"),
        acceleration=True),
    Capability(
        "drain_rpc", "a node drained for preemption with a deadline through the GCS (DrainNode)",
        "`ray drain-node`, Ray's own CLI, with the same reason and deadline",
        proto("autoscaler_pb2.py", "DrainNodeRequest", "deadline_timestamp_ms",
               "DRAIN_NODE_REASON_PREEMPTION")),
    Capability(
        "gcs_removal", "a finished run's leftover actors and placement groups removed through "
        "the GCS", "leftovers reported, not removed",
        all_of(proto("gcs_service_pb2.py", "KillActorViaGcsRequest", "no_restart"),
                proto("gcs_service_pb2.py", "RemovePlacementGroupRequest"))),
    Capability(
        "trainer_reach", "a fault's reach counts everything of the trainer's jobs on the nodes "
        "it hits: its plain tasks leased or running there (the GCS's task events), its "
        "placement-group bundles placed there and its drivers", "a fault's reach counts the "
        "trainer's actors only (a program of plain tasks reads as reached by nothing)",
        all_of(proto("gcs_service_pb2.py", "GetTaskEventsRequest", "limit", "filters"),
                proto("gcs_service_pb2.py", "GetTaskEventsRequest.Filters", "exclude_driver",
                       "state_filters", "NOT_EQUAL"),
                proto("gcs_service_pb2.py", "GetTaskEventsReply", "events_by_task", "status"),
                proto("gcs_pb2.py", "TaskEvents", "task_info", "state_updates", "job_id",
                       "attempt_number"),
                proto("gcs_pb2.py", "TaskStateUpdate", "node_id", "worker_pid", "state_ts_ns"),
                proto("common_pb2.py", "TaskInfoEntry", "type", "name", "func_or_class_name",
                       "NORMAL_TASK", "RUNNING", "SUBMITTED_TO_WORKER", "FINISHED", "FAILED"),
                proto("common_pb2.py", "Bundle", "bundle_id", "node_id"),
                proto("gcs_pb2.py", "PlacementGroupTableData", "bundles", "state", "REMOVED"),
                proto("gcs_pb2.py", "JobTableData", "driver_address", "driver_pid", "config",
                       "is_dead", "entrypoint"),
                proto("common_pb2.py", "JobConfig", "ray_namespace"),
                # the job table read as Ray's own job_table reads it (GcsReader.live_jobs)
                in_function("_private/state.py", "GlobalState.job_table",
                             "skip_submission_job_info_field=True",
                             "skip_is_running_tasks_field=True"))),
    Capability(
        "draining_nodes", "a trainer sees Ray's preemption notices (draining nodes and their "
        "deadlines)", "no notice: the run learns of a preemption when the node dies",
        has_params("_private/state.py", "GlobalState.get_draining_nodes", "self")),
    Capability(
        "free_per_node", "`rlsim plan --rehearse` shows each node's free GPUs and CPUs after "
        "placing", "the rehearsal says where groups were placed, not what was left",
        has_params("_private/state.py", "GlobalState.available_resources_per_node", "self")),
    Capability(
        "version_stamp", "a docker node claims another Ray version (ray_version_mismatch)",
        "the version-mismatch story cannot be staged: refused with this reason",
        has_text("_version.py", "version = ")),
    Capability(
        "train_callbacks", "Ray Train jobs observed through RAY_TRAIN_CALLBACKS (Train V2's "
        "controller callbacks)", "the ray_train adapter refuses: it cannot see the job",
        all_of(has_text("train/v2/_internal/callbacks/env_callback.py", TRAIN_CALLBACKS_VAR),
                has_text("train/v2/_internal/execution/callback.py", "class ControllerCallback",
                          "class WorkerGroupCallback", "class ReportCallback",
                          "def after_report", "def after_controller_state_update"),
                has_text("train/v2/_internal/execution/controller/state.py",
                          "class RestartingState", "class ReschedulingState",
                          "class ErroredState", "class FinishedState",
                          "training_failed_error"),
                has_params("train/v2/_internal/execution/worker_group/worker_group.py",
                            "WorkerGroup.get_workers", "self"),
                has_text("train/v2/_internal/execution/worker_group/worker.py",
                          "distributed_context", "node_ip: str", "pid: int"))),
)
BY_NAME = {c.name: c for c in CAPABILITIES}
