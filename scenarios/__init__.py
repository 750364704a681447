"""The reference catalogue: scenario files of rlsim's own, shipped with the package as
``rlsim.catalogue`` (``rlsim init`` and the launchers start from it; ``rlsim run`` and pytest read
it like any folder of scenarios). ``trainers/`` holds the small trainers its scenarios start."""
