"""The Ray cluster a sweep runs on: a one-node cluster of our own, or one already up.

Every cluster `emu` starts or joins uses Ray's token authentication: a Ray head without
it runs anyone's tasks (as root, here), so one is refused before this machine's token is
ever sent to it.

``with connect("local") as info:`` starts a one-node Ray cluster on this machine and
stops it on every way out (normal end, error, Ctrl-C, SIGTERM, SIGHUP). Its head is a
``ray start --head --block`` of its own, in a session of its own (so a signal sent to
this command's process group, by ``timeout`` or a closed terminal, reaches this command
only, which then cancels its points in order), bound to 127.0.0.1 only, and dies with
this process if it is killed (SIGKILL: its GCS and raylet at once, Ray's agents within a
minute). Its token (fresh, random), logs and sockets live in a directory from ``mkdtemp``
(root's, mode 0700: Ray makes its own directories under it world-writable, which then
nobody else can reach), removed at the end, and by ``emu clean`` after a SIGKILL
(commands/sweep/cluster_local.py).

``connect("auto")`` joins the cluster `ray start` made on this machine, found in Ray's
address file (``/tmp/ray/ray_current_cluster``), which is trusted only if root wrote it
and nobody else can replace it; ``connect("HOST:PORT")`` joins the one whose head is
there; either is left running. Before joining, an unauthenticated probe (in a child
process holding no token) must be refused by the head's GCS: a head that answers it has
no token authentication and is refused, naming the fix; one that does not answer within
:data:`JOIN_TIMEOUT_S` is refused too. A process that is already connected (``ray.init``
done by its caller) is used as it is and left connected.

The driver connects (``ray.init``) from the project's root directory: Ray puts the
driver's working directory on every worker's ``sys.path``, and the caller's may hold
modules planted by someone else. The signal handlers in place before ``ray.init``
(`emu`'s: SIGTERM and SIGHUP unwind like Ctrl-C) are put back after it, since Ray
replaces SIGTERM's with its own (which exits at once, printing a native stack trace).

Every node of a cluster must advertise one ``fabric_slot`` (`ray start ...
--resources='{"fabric_slot": 1}'`): a point's task needs one, so two fabrics never share
a node. A cluster with none is refused before anything is submitted.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commands.sweep.cluster_auth import (
    FIX_TOKEN,
    JOIN_TIMEOUT_S,
    SLOT,
    SLOT_RESOURCES,
    auth_env,
    auto_address,
    check_cluster,
    probe_auth,
    require_token_auth,
)
from commands.sweep.cluster_auth import (
    token as machine_token,
)
from commands.sweep.cluster_local import local_head
from emu import timeouts
from emu.errors import EmuError

__all__ = ["JOIN_TIMEOUT_S", "SLOT", "ClusterInfo", "auto_address", "check_cluster",
           "connect", "describe", "preflight", "probe_auth"]

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class ClusterInfo:
    """What a sweep runs on: ``slots`` fabric slots over ``nodes`` live nodes;
    ``started_s`` the time it took to start (local) or join; ``address`` the head's GCS
    (None when the caller had connected); ``temp_dir`` the local cluster's directory."""

    kind: str  # "local", "auto", an address, or "connected"
    nodes: int
    slots: int
    started_s: float
    temp_dir: str | None = None
    address: str | None = None


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


def preflight(cluster: str, probe: bool = True) -> str | None:
    """Everything that can refuse ``cluster`` before anything is created or started:
    its form and Ray; for a cluster to join, its address (``auto``: from a trusted
    file), this machine's token and (``probe``) a head there that answers and refuses
    requests without a token. Returns the address to join (None for local)."""
    check_cluster(cluster)
    _ray()
    if cluster == "local":
        return None
    address = auto_address() if cluster == "auto" else cluster
    with auth_env({"RAY_AUTH_MODE": "token"}):
        token = machine_token()
    if token is None:
        raise EmuError(f"--cluster {cluster}: no Ray token on this machine, and the "
                       f"cluster must use token authentication: {FIX_TOKEN}")
    if probe:
        _reachable(address, cluster)
        require_token_auth(address, cluster, token)
    return address



@contextmanager
def connect(cluster: str, say: Callable[[str], None] = print,
            checked: bool = False) -> Iterator[ClusterInfo]:
    """Connect to (or start) the cluster ``cluster`` names (see the module docstring).
    ``checked``: :func:`preflight` has just probed it (not done again)."""
    ray = _ray()
    t0 = time.monotonic()
    if ray.is_initialized():
        yield _info(ray, "connected", t0)
        return
    address = preflight(cluster, probe=not checked)
    with ExitStack() as stack:
        tmp = None
        if address is None:
            tmp, address, token_path = stack.enter_context(local_head(say))
            # our own head: its token authentication is checked all the same
            require_token_auth(address, cluster, Path(token_path).read_text().strip())
            auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": token_path,
                    "RAY_AUTH_TOKEN": None}
        else:
            say(f"joining the Ray cluster at {address}")
            auth = {"RAY_AUTH_MODE": "token"}
        stack.enter_context(auth_env(auth))
        stack.enter_context(_driver(ray, address, cluster))
        info = _info(ray, cluster, t0, tmp, address)
        if info.slots < 1:
            raise EmuError(f"--cluster {cluster}: its {info.nodes} node(s) advertise no "
                           f"{SLOT!r} resource, so no point could ever run: start every node "
                           f"with `ray start ... --resources={SLOT_RESOURCES}`")
        yield info


@contextmanager
def _driver(ray: Any, address: str, cluster: str) -> Iterator[None]:
    """``ray.init`` to ``address`` from the project's root, this process's signal
    handlers kept; ``ray.shutdown`` at the end."""
    from ray._private import ray_constants
    from ray._private import utils as ray_utils
    from ray.exceptions import AuthenticationError

    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP,
                                                  signal.SIGINT)}
    try:
        with ExitStack() as init:
            # Ray puts the driver's working directory on every worker's sys.path.
            init.enter_context(_cwd(PROJECT_ROOT))
            # ray.init first makes SIGTERM exit at once; ours (emu's: unwind like Ctrl-C)
            # must stay for the whole of it.
            init.enter_context(_patched(ray_utils, "set_sigterm_handler", _keep_handler))
            if _loopback(address):
                # Ray turns 127.0.0.1 into this machine's outward address unless it is
                # told that clusters are off; a head on loopback (the local one) is
                # reachable on 127.0.0.1 only.
                init.enter_context(_patched(ray_constants, "ENABLE_RAY_CLUSTER", False))
            try:
                ray.init(address=address, log_to_driver=False, configure_logging=False)
            except AuthenticationError as e:
                raise EmuError(f"--cluster {cluster}: the head at {address} refused this "
                               f"machine's Ray token ({str(e).split('.')[0]}): "
                               f"{FIX_TOKEN}") from None
            except ConnectionError as e:
                raise EmuError(f"--cluster {cluster}: could not join the Ray cluster at "
                               f"{address} ({e})") from None
            finally:
                # Ray's core worker installs a native SIGTERM handler: ours go back.
                for s, h in handlers.items():
                    if h is not None:
                        signal.signal(s, h)
        yield
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for s, h in handlers.items():
            if h is not None:
                signal.signal(s, h)


def _loopback(address: str) -> bool:
    host = address.rpartition(":")[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


def _keep_handler(handler: Any) -> None:
    """Stands in for Ray's ``set_sigterm_handler`` during ``ray.init``: ours stays."""


@contextmanager
def _patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    """``obj.name`` set to ``value`` for the body; it must exist (a Ray upgrade that
    renames it must fail loudly, not silently leave Ray's behaviour in place)."""
    if not hasattr(obj, name):
        raise EmuError(f"this Ray ({getattr(_ray(), '__version__', '?')}) has no "
                       f"{obj.__name__}.{name}, which emu sweep relies on: install "
                       "'ray>=2.60,<3' as pyproject.toml's [sweep] extra says")
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


@contextmanager
def _cwd(path: Path) -> Iterator[None]:
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def _reachable(address: str, cluster: str, timeout_s: float = 5.0) -> None:
    """Fail at once on a HOST:PORT nobody listens on (Ray itself waits for minutes)."""
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)),
                                 timeout=timeouts.scaled(timeout_s)).close()
    except OSError as e:
        raise EmuError(f"--cluster {cluster}: nothing answers at {address} ({e}); start the "
                       f"head with `ray start --head --resources={SLOT_RESOURCES}` "
                       "(docs/concepts/sweeps.md)") from None


def _info(ray: Any, kind: str, t0: float, tmp: str | None = None,
          address: str | None = None) -> ClusterInfo:
    nodes, slots = describe(ray)
    return ClusterInfo(kind=kind, nodes=nodes, slots=slots,
                       started_s=time.monotonic() - t0, temp_dir=tmp, address=address)
