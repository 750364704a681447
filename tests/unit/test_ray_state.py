"""Asking a GCS that is not there: `rlsim status` of a cluster whose GCS process died (the head's
other processes alive) sees nobody alive at once, instead of Ray's client retrying for 15 s and
raising a traceback."""

import time

from rlsim.backends.ray_state import _listens, alive_nodes


def test_a_gcs_port_nobody_listens_on_sees_nobody_alive_at_once(tmp_path):
    token = tmp_path / "token"
    token.write_text("x" * 64)
    t0 = time.monotonic()
    assert not _listens("127.0.0.1:1")
    assert alive_nodes("127.0.0.1:1", str(token)) == {}
    assert time.monotonic() - t0 < 5
