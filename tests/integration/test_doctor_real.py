"""``rlsim doctor --ray-address`` against a live GCS: the bounded check asked before Ray connects
(a TCP connection and the gRPC greeting) must let a real head through, and the doctor then runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlsim.doctor import gcs_silence, parse_address

RLSIM = str(Path(sys.executable).parent / "rlsim")


@pytest.mark.integration
@pytest.mark.rlsim_cluster(nodes=2, gpus_per_node=1)
def test_doctor_by_address_reaches_a_live_gcs(rlsim_cluster):
    host, port = parse_address(rlsim_cluster.address)
    assert gcs_silence(host, port) is None
    out = subprocess.run([RLSIM, "doctor", "--ray-address", rlsim_cluster.address],
                         env={**os.environ, **rlsim_cluster.driver_env()}, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "no findings" in out.stdout and rlsim_cluster.address.split(":")[0] in out.stdout
