"""A simulated cluster spread over the machines of a substrate: a plain Ray cluster of CPU
machines (``ray start``, Slurm or KubeRay), chosen by its address (``cluster.on``, ``rlsim
cluster --on``; the registry, :mod:`rlsim.backends`, makes that choice).

- :mod:`~rlsim.backends.substrate.cluster`: :class:`SubstrateCluster`, the backend; node ``i``
  on machine ``i % machines``.
- :mod:`~rlsim.backends.substrate.hosts`: the machine's side, one host actor per machine that
  starts, watches and ends the nodes' processes there, and the driver's way to find them.
- :mod:`~rlsim.backends.substrate.remote`: what the cluster does through the hosts (a fault's
  firewall rules on each machine, the doctor's probe, a host's answer in its own words).
- ``python -m rlsim.backends.substrate ADDRESS``: the substrate's machines, as JSON lines.

Nothing here is imported by this package itself: each machine's worker imports ``hosts`` for
its host actor, and should not pay for the backends' modules on the way.
"""
