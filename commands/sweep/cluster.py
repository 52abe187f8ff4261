"""The Ray cluster a sweep runs on: a one-node cluster of our own, or one already up.

``with connect("local") as info:`` starts a Ray head on this machine (one fabric slot, its
logs and sockets in a temporary directory) and stops it, and removes the directory, on
every way out: normal end, error, Ctrl-C (Ray's own processes also share this process's
fate, so a killed sweep leaves none). ``connect("auto")`` joins the cluster `ray start`
made on this machine, ``connect("HOST:PORT")`` the one at that address; either is left
running. A process that is already connected (``ray.init`` done by its caller) is used
as it is and left connected.

Every node of a cluster must advertise one ``fabric_slot`` (`ray start ...
--resources='{"fabric_slot": 1}'`): a point's task needs one, so two fabrics never share
a node. A cluster with none is refused before anything is submitted.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from emu.errors import EmuError

__all__ = ["SLOT", "ClusterInfo", "check_cluster", "connect", "describe"]

SLOT = "fabric_slot"  # the custom resource: one per node, one per point's task
# The object store only carries points' result files (a few MB each): a small one spares
# this machine's shared memory.
LOCAL_OBJECT_STORE_BYTES = 256 * 1024 * 1024
SLOT_RESOURCES = '\'{"fabric_slot": 1}\''


@dataclass(frozen=True)
class ClusterInfo:
    """What a sweep runs on: ``slots`` fabric slots over ``nodes`` live nodes;
    ``started_s`` the time it took to start (local) or join."""

    kind: str  # "local", "auto", an address, or "connected"
    nodes: int
    slots: int
    started_s: float
    temp_dir: str | None = None


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise EmuError("emu sweep needs Ray: pip install 'ray>=2.60,<3' into the venv "
                       "(the project's [sweep] extra)") from None
    return ray


def describe(ray: Any) -> tuple[int, int]:
    """(live nodes, fabric slots) of the connected cluster."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    slots = int(sum(n.get("Resources", {}).get(SLOT, 0) for n in nodes))
    return len(nodes), slots


@contextmanager
def connect(cluster: str, say: Callable[[str], None] = print) -> Iterator[ClusterInfo]:
    """Connect to (or start) the cluster ``cluster`` names (see the module docstring)."""
    ray = _ray()
    t0 = time.monotonic()
    if ray.is_initialized():
        yield _info(ray, "connected", t0)
        return
    tmp = None
    try:
        if cluster == "local":
            # A short path: Ray's Unix sockets live under it (at most 107 bytes).
            tmp = tempfile.mkdtemp(prefix="sae-ray-", dir="/tmp")
            say(f"starting a one-node Ray cluster (logs in {tmp}, removed at the end)")
            ray.init(num_cpus=os.cpu_count() or 1, resources={SLOT: 1},
                     include_dashboard=False, _temp_dir=tmp,
                     object_store_memory=LOCAL_OBJECT_STORE_BYTES, log_to_driver=False,
                     configure_logging=False)
        else:
            say(f"joining the Ray cluster at {cluster}")
            _reachable(cluster)
            try:
                ray.init(address=cluster, log_to_driver=False, configure_logging=False)
            except ConnectionError as e:
                raise EmuError(f"--cluster {cluster}: no Ray cluster there ({e}); start one "
                               "with `ray start --head --resources="
                               f"{SLOT_RESOURCES}` or use --cluster local") from None
        info = _info(ray, cluster, t0, tmp)
        if info.slots < 1:
            raise EmuError(f"--cluster {cluster}: its {info.nodes} node(s) advertise no "
                           f"{SLOT!r} resource, so no point could ever run: start every node "
                           f"with `ray start ... --resources={SLOT_RESOURCES}`")
        yield info
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def check_cluster(cluster: str) -> None:
    """EmuError unless ``cluster`` is local, auto, HOST:PORT or a ray:// address."""
    if cluster in ("local", "auto") or "://" in cluster:
        return
    host, sep, port = cluster.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise EmuError(f"--cluster {cluster!r} is invalid: must be local, auto or HOST:PORT "
                       "(the head's GCS address, port 6379 by default)")


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail at once on a HOST:PORT nobody listens on (Ray itself waits for minutes)."""
    check_cluster(address)
    if address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise EmuError(f"--cluster {address}: nothing answers there ({e}); start the head "
                       f"with `ray start --head --resources={SLOT_RESOURCES}`") from None


def _info(ray: Any, kind: str, t0: float, tmp: str | None = None) -> ClusterInfo:
    nodes, slots = describe(ray)
    return ClusterInfo(kind=kind, nodes=nodes, slots=slots,
                       started_s=time.monotonic() - t0, temp_dir=tmp)
