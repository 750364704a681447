"""Launchers `rlsim launch` writes: a checked `Launch` (the head's steps, the rank script) rendered
for one platform each (Slurm, KubeRay, SkyPilot and dstack)."""
