"""torch.distributed's gloo on the fabric: a process group bound to a host's fabric address."""

from __future__ import annotations

import datetime

BACKEND = "fabricgloo"


def init_gloo(addr: str, master_addr: str, master_port: int, rank: int, size: int,
              timeout_s: float):
    """Initialise the default process group over gloo on ``addr`` (this host's fabric
    address), rendezvous at ``[master_addr]:master_port``; returns ``torch.distributed``."""
    import torch.distributed as dist

    def make(store, rank, size, timeout):
        opts = dist.ProcessGroupGloo._Options()
        # Gloo's default device is the hostname's address, which the namespaces lack.
        opts._devices = [dist.ProcessGroupGloo.create_device(hostname=addr)]
        opts._timeout = timeout
        return dist.ProcessGroupGloo(store, rank, size, opts)

    dist.Backend.register_backend(BACKEND, make, devices=["cpu"])
    dist.init_process_group(BACKEND, init_method=f"tcp://[{master_addr}]:{master_port}",
                            rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=timeout_s))
    return dist
