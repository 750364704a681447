"""ci/uv_flags.py: uv installs from where pip would on this machine (pip's configuration, as
``pip config list`` prints it), taking the best version across every index as pip does."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "ci"))
from uv_flags import flags  # noqa: E402 - ci/ is not a package

STRATEGY = ["--index-strategy", "unsafe-best-match"]


def test_a_machine_with_wheels_on_disk_gets_its_indexes_links_and_constraints():
    listed = ("global.constraint='/etc/xdg/pip/constraints.txt'\n"
              "global.extra-index-url='file:///opt/pypi/simple file:///opt/more/simple'\n"
              "global.find-links='/opt/wheels'\n"
              "global.cert='/etc/ssl/certs/ca-certificates.crt'\n")
    assert flags(listed) == [*STRATEGY,
                             "--extra-index-url", "file:///opt/pypi/simple",
                             "--extra-index-url", "file:///opt/more/simple",
                             "--find-links", "/opt/wheels",
                             "--constraint", "/etc/xdg/pip/constraints.txt"]


def test_pips_variables_win_over_its_install_section_and_that_over_global():
    listed = ("global.index-url='https://mirror.example/simple'\n"
              "install.index-url='https://install.example/simple'\n"
              "global.find-links='/global'\n"
              ":env:.find-links='/from/env /and/more'\n")
    assert flags(listed) == [*STRATEGY, "--index-url", "https://install.example/simple",
                             "--find-links", "/from/env", "--find-links", "/and/more"]


def test_without_configuration_uv_keeps_its_defaults_and_pips_choice_of_version():
    assert flags("") == STRATEGY
    assert flags("global.timeout='60'\nsomething odd\n") == STRATEGY
