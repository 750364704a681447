"""Unit tests reserve clusters they never start: their slot claims go to a folder of the test's own,
never into the machine-wide one (rlsim.host.slots), where they would hold real slots for as long as
the test process lives."""

import pytest

from rlsim.host import slots


@pytest.fixture(autouse=True)
def private_claims(tmp_path_factory, monkeypatch):
    monkeypatch.setattr(slots, "CLAIMS", tmp_path_factory.mktemp("claims") / "rlsim-slots")
