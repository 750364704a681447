"""Helper for test_trainer: two ranks on the first two GPU nodes all-reduce through the trainer's
gloo set-up; prints {"sums", "ips", "rank1_peers"} as JSON. Run with RAY_ADDRESS set."""

import datetime
import json

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


def _v4(ip: str) -> str:
    import ipaddress

    mapped = getattr(ipaddress.ip_address(ip), "ipv4_mapped", None)
    return str(mapped) if mapped else ip


@ray.remote(num_cpus=0)
class Rank:
    def ip(self):
        return ray.util.get_node_ip_address()

    def store(self):
        import torch.distributed as dist

        self.s = dist.TCPStore(self.ip(), 0, is_master=True, wait_for_workers=False,
                               timeout=datetime.timedelta(seconds=20))
        return self.ip(), self.s.port

    def allreduce(self, addr, rank):
        import psutil
        import torch
        import torch.distributed as dist

        from trainer.host import _gloo_bound_to

        store = getattr(self, "s", None) or dist.TCPStore(
            addr[0], addr[1], is_master=False, timeout=datetime.timedelta(seconds=20))
        with _gloo_bound_to(self.ip()):
            dist.init_process_group("gloo", store=store, rank=rank, world_size=2,
                                    timeout=datetime.timedelta(seconds=20))
        t = torch.tensor([float(rank + 1)])
        dist.all_reduce(t)
        # an IPv6 socket (torch's TCPStore binds dual-stack) names an IPv4 peer ::ffff:a.b.c.d
        peers = sorted({_v4(c.raddr.ip) for c in psutil.Process().net_connections("tcp")
                        if c.raddr})
        dist.destroy_process_group()
        return t.item(), peers


ray.init(logging_level="ERROR")
from trainer.groups import alive_gpu_nodes  # noqa: E402

nodes = alive_gpu_nodes()[:2]
ranks = [Rank.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
         .remote() for n in nodes]
addr = ray.get(ranks[0].store.remote(), timeout=60)
out = ray.get([r.allreduce.remote(addr, i) for i, r in enumerate(ranks)], timeout=60)
print(json.dumps({"sums": [o[0] for o in out], "ips": ray.get([r.ip.remote() for r in ranks]),
                  "rank1_peers": out[1][1]}))
