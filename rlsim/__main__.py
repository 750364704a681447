"""``python -m rlsim``: the ``rlsim`` command (what the launchers run on a cluster's head)."""

from rlsim.commands import main

main()
