"""Host plumbing: the private home, the registry of running clusters, addresses and ports, and the
kernel's parts a simulated node is made of (cgroups, iptables, tc, mounts, processes). It knows no
backend."""
