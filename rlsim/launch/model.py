"""What every launcher ``rlsim launch`` writes is made from: the cluster to start and what to run
on it. Checked once here; each launcher (slurm, kuberay, skypilot, dstack) only renders it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Launch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    nodes: int = Field(ge=1, le=4096, description="GPU nodes, the head included")
    gpus_per_node: int = Field(ge=0, le=64)
    python: str = Field(description="the Python on every node that has rlsim and Ray installed")
    scenarios: list[str] = Field(min_length=1, description="scenario files or folders, as the "
                                 "nodes see them")
    report_dir: str = Field(description="a directory every node shares: reports, Ray's token")
    image: str | None = Field(None, description="a container image every node runs")
    time: str = Field("01:00:00", pattern=r"^(\d+-)?\d{1,2}:\d{2}:\d{2}$",
                      description="the job's time limit (Slurm D-HH:MM:SS)")
    port: int = Field(6379, ge=1024, le=65535, description="the head's GCS port")
    wait_s: float = Field(600, gt=0, le=86400, description="bound on the nodes joining")
    allow_disruptive: bool = False

    @field_validator("python", "report_dir")
    @classmethod
    def _absolute(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"{v!r} is not an absolute path: every node resolves it the same "
                             "way only if it is absolute")
        return v
