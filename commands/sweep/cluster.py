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
minute; the directory below then stays). Its token (fresh, random), logs and sockets live in a
directory from ``mkdtemp`` (root's, mode 0700: Ray makes its own directories under it
world-writable, which then nobody else can reach), removed at the end.

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

import ctypes
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emu import timeouts
from emu.errors import EmuError

__all__ = ["JOIN_TIMEOUT_S", "SLOT", "ClusterInfo", "auto_address", "check_cluster",
           "connect", "describe", "preflight", "probe_auth"]

SLOT = "fabric_slot"  # the custom resource: one per node, one per point's task
# The object store only carries points' result files (a few MB each): a small one spares
# this machine's shared memory.
LOCAL_OBJECT_STORE_BYTES = 256 * 1024 * 1024
SLOT_RESOURCES = '\'{"fabric_slot": 1}\''
PROJECT_ROOT = Path(__file__).resolve().parents[2]
JOIN_TIMEOUT_S = 20.0  # a head's GCS answers the probe within this (scaled)
START_TIMEOUT_S = 90.0  # the local head is up within this (scaled; about 5 s here)
STOP_TIMEOUT_S = 30.0  # the local head stops within this, else it is killed
AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
FIX_AUTH = ("restart every node of it with token authentication: RAY_AUTH_MODE=token and "
            "the cluster's token in RAY_AUTH_TOKEN_PATH (or /root/.ray/auth_token), as "
            "README.md's \"Sweeps on a Ray cluster\" shows")
FIX_TOKEN = ("put the head's token (`ray get-auth-token` on the head) in /root/.ray/"
             "auth_token (mode 0600) or in a file named by RAY_AUTH_TOKEN_PATH")

# Run in a child that starts with no token (RAY_AUTH_MODE=disabled, an empty HOME): a
# head with token authentication must refuse its first request; then, with the token
# read from stdin (never argv: `ps` shows it), it must answer. Prints one line per
# request: refused (for want of a valid token), answered, or error TYPE MESSAGE.
_PROBE = """\
import os, sys
from ray._raylet import AuthenticationTokenLoader, Config, GcsClient
from ray.exceptions import AuthenticationError
def ask():
    try:
        GcsClient(address=sys.argv[1]).internal_kv_get(b"emu-probe", None, timeout=5)
    except AuthenticationError:
        return "refused"
    except Exception as e:
        return " ".join(["error", type(e).__name__, *str(e).splitlines()[:1]])
    return "answered"
token = sys.stdin.read().strip()
first = ask()
print(first, flush=True)
if first == "refused" and token:
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()
    print(ask(), flush=True)
"""


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


def check_cluster(cluster: str) -> None:
    """EmuError unless ``cluster`` is local, auto or HOST:PORT."""
    if "://" in cluster:
        raise EmuError(f"--cluster {cluster!r} is invalid: Ray Client addresses are not "
                       "supported (their token authentication cannot be checked); give the "
                       "head's GCS address HOST:PORT (port 6379 by default)")
    if cluster in ("local", "auto"):
        return
    host, sep, port = cluster.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise EmuError(f"--cluster {cluster!r} is invalid: must be local, auto or HOST:PORT "
                       "(the head's GCS address, port 6379 by default)")


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
    with _auth_env({"RAY_AUTH_MODE": "token"}):
        token = _token()
    if token is None:
        raise EmuError(f"--cluster {cluster}: no Ray token on this machine, and the "
                       f"cluster must use token authentication: {FIX_TOKEN}")
    if probe:
        _reachable(address, cluster)
        _require_token_auth(address, cluster, token)
    return address


def auto_address(path: Path | None = None) -> str:
    """The address in Ray's address file (``path``, default Ray's own:
    /tmp/ray/ray_current_cluster), if the file can be trusted: a regular file (no
    symlink) owned by root and writable by nobody else, in a directory owned by root that
    nobody else can write into (or a sticky one). Else EmuError asking for HOST:PORT."""
    if path is None:
        from ray._common.utils import get_ray_address_file

        path = Path(get_ray_address_file(None))
    ask = "; give the head's address instead: --cluster HOST:PORT (`ray start --head` " \
          "prints it)"
    parent = path.parent
    try:
        dst = os.stat(parent, follow_symlinks=False)
    except FileNotFoundError:
        raise EmuError(f"--cluster auto: no Ray cluster started here ({parent} does not "
                       f"exist){ask}") from None
    if not stat.S_ISDIR(dst.st_mode):
        raise EmuError(f"--cluster auto: {parent} is not a directory (a symlink?), so "
                       f"{path.name} cannot be trusted{ask}")
    sticky = bool(dst.st_mode & stat.S_ISVTX)
    others_write = bool(dst.st_mode & (stat.S_IWGRP | stat.S_IWOTH))
    if dst.st_uid != 0 or (others_write and not sticky):
        raise EmuError(f"--cluster auto: {parent} (owner uid {dst.st_uid}, mode "
                       f"{stat.S_IMODE(dst.st_mode):04o}) lets users other than root "
                       f"replace {path.name} (`ray start` makes it world-writable), so "
                       f"the address in it cannot be trusted{ask}")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise EmuError(f"--cluster auto: no Ray cluster started here ({path} does not "
                       f"exist){ask}") from None
    except OSError as e:  # ELOOP: a symlink
        raise EmuError(f"--cluster auto: {path} cannot be trusted ({e}){ask}") from None
    with os.fdopen(fd, "rb") as f:
        fst = os.fstat(f.fileno())
        if not stat.S_ISREG(fst.st_mode) or fst.st_uid != 0 or \
                fst.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise EmuError(f"--cluster auto: {path} (owner uid {fst.st_uid}, mode "
                           f"{stat.S_IMODE(fst.st_mode):04o}) is not a regular file that "
                           f"only root writes, so the address in it cannot be trusted{ask}")
        text = f.read(256).decode(errors="replace").strip()
    try:
        check_cluster(text)
        if text in ("local", "auto"):
            raise EmuError(text)
    except EmuError:
        raise EmuError(f"--cluster auto: {path} holds {text!r}, not a HOST:PORT{ask}") from None
    return text


def probe_auth(address: str, token: str | None = None,
               timeout_s: float | None = None) -> tuple[str, ...]:
    """What the GCS at ``address`` says to a request carrying no token, then (if it was
    refused and ``token`` is given) to one carrying ``token``: each "refused" (for want
    of a valid token), "answered", or "error ..." (no Ray GCS answered within
    ``timeout_s``, default :data:`JOIN_TIMEOUT_S`, scaled). A head with token
    authentication says ("refused", "answered") to its own token."""
    if timeout_s is None:
        timeout_s = JOIN_TIMEOUT_S
    home = tempfile.mkdtemp(prefix="sae-ray-probe-")  # no ~/.ray/auth_token in it
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home,
           "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    try:
        r = subprocess.run([sys.executable, "-I", "-c", _PROBE, address], cwd="/", env=env,
                           input=token or "", capture_output=True, text=True,
                           timeout=timeouts.scaled(timeout_s))
    except subprocess.TimeoutExpired as e:
        said = (e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or "")
        return (*said.split("\n")[:-1], f"error: no answer within "
                f"{timeouts.describe(timeout_s)}")
    finally:
        shutil.rmtree(home, ignore_errors=True)
    lines = tuple(r.stdout.strip().splitlines())
    if not lines:
        return (f"error: the probe failed (exit {r.returncode}): {r.stderr.strip()[-300:]}",)
    return lines


def _token() -> str | None:
    """This process's Ray token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or
    ~/.ray/auth_token), None if there is none."""
    from ray._raylet import AuthenticationTokenLoader  # type: ignore[attr-defined]

    loader = AuthenticationTokenLoader.instance()
    if not loader.has_token(ignore_auth_mode=True):
        return None
    return str(loader.get_raw_token(ignore_auth_mode=True))


def _require_token_auth(address: str, cluster: str, token: str) -> None:
    """EmuError unless the GCS at ``address`` refuses a request without a token and
    answers one with ``token``."""
    got = probe_auth(address, token)
    if got[0] == "answered":
        raise EmuError(f"--cluster {cluster}: the Ray cluster at {address} runs without "
                       "token authentication (it answered a request carrying no token), "
                       "so anyone who reaches it runs code as root on its nodes: "
                       f"{FIX_AUTH}")
    if got[0] != "refused":
        raise EmuError(f"--cluster {cluster}: no Ray cluster answers at {address} "
                       f"({got[0].removeprefix('error: ')}); start its head with `ray "
                       f"start --head --resources={SLOT_RESOURCES}` (README.md, \"Sweeps on "
                       "a Ray cluster\") or use --cluster local")
    if got[1:] != ("answered",):
        raise EmuError(f"--cluster {cluster}: the head at {address} refused this machine's "
                       f"Ray token ({', '.join(got[1:]) or 'no answer'}): {FIX_TOKEN}")


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
            tmp, address, token_path = stack.enter_context(_local_head(say))
            # our own head: its token authentication is checked all the same
            _require_token_auth(address, cluster, Path(token_path).read_text().strip())
            auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": token_path,
                    "RAY_AUTH_TOKEN": None}
        else:
            say(f"joining the Ray cluster at {address}")
            auth = {"RAY_AUTH_MODE": "token"}
        stack.enter_context(_auth_env(auth))
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


@contextmanager
def _auth_env(values: dict[str, str | None]) -> Iterator[None]:
    """This process's Ray authentication settings (environment; None unsets) for the
    body, Ray's cached view of them refreshed on the way in and out."""
    old = {k: os.environ.get(k) for k in AUTH_ENV}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        _refresh_auth()
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        _refresh_auth()


def _refresh_auth() -> None:
    # Ray caches the mode (RayConfig) and the token: the config first, then the token
    # (the order Ray's own tests use, so no thread reloads a token in the wrong mode).
    from ray._raylet import (  # type: ignore[attr-defined]  # not in Ray's stub
        AuthenticationTokenLoader,
        Config,
    )

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def _die_with_parent() -> None:  # pragma: no cover (runs in the child, before exec)
    # PR_SET_PDEATHSIG (1): the head is killed if this process dies, even by SIGKILL.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)


@contextmanager
def _local_head(say: Callable[[str], None]) -> Iterator[tuple[str, str, str]]:
    """A one-node Ray head of our own (see the module docstring): yields (its directory,
    its GCS address, its token file); stopped, and the directory removed, at the end."""
    from ray._private.authentication.authentication_token_generator import (
        generate_new_authentication_token,
    )

    # A short path: Ray's Unix sockets live under it (at most 107 bytes).
    tmp = tempfile.mkdtemp(prefix="sae-ray-", dir="/tmp")
    proc: subprocess.Popen[bytes] | None = None
    try:
        token = os.path.join(tmp, "token")
        fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(generate_new_authentication_token())
        ray_dir = os.path.join(tmp, "ray")
        say(f"starting a one-node Ray cluster (logs in {tmp}, removed at the end)")
        env = {k: v for k, v in os.environ.items()
               if k not in AUTH_ENV and k != "RAY_ADDRESS"}
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=token,
                   # 127.0.0.1 stays the node's address (and every port binds to it)
                   RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0")
        cmd = [sys.executable, "-I", "-m", "ray.scripts.scripts", "start", "--head",
               "--block", "--port=0", "--node-ip-address=127.0.0.1", f"--temp-dir={ray_dir}",
               f"--num-cpus={os.cpu_count() or 1}", f'--resources={{"{SLOT}": 1}}',
               "--include-dashboard=false", "--disable-usage-stats",
               f"--object-store-memory={LOCAL_OBJECT_STORE_BYTES}"]
        log_path = os.path.join(tmp, "head.log")
        with open(log_path, "wb") as log:
            # A session of its own: signals for this command's process group (`timeout`,
            # a closed terminal) reach this command only, which stops the head in order.
            proc = subprocess.Popen(cmd, cwd=PROJECT_ROOT, env=env, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, preexec_fn=_die_with_parent)
        address = _wait_address(Path(ray_dir) / "ray_current_cluster", proc, log_path)
        yield tmp, address, token
    finally:
        left = _stop_head(proc) if proc is not None else []
        shutil.rmtree(tmp, ignore_errors=True)
    # (not raised over an exception already on its way out, e.g. an interrupt)
    if left:
        raise EmuError(f"--cluster local: Ray processes {left} outlived their head "
                       f"(SIGKILL did not end them within {timeouts.describe(STOP_TIMEOUT_S)})")


def _wait_address(path: Path, proc: subprocess.Popen[bytes], log_path: str) -> str:
    wait = timeouts.scaled(START_TIMEOUT_S)
    deadline = time.monotonic() + wait
    while True:
        if path.is_file() and (text := path.read_text().strip()):
            return text
        if proc.poll() is not None or time.monotonic() > deadline:
            why = (f"exited with status {proc.returncode}" if proc.returncode is not None
                   else f"not up within {timeouts.describe(START_TIMEOUT_S)}")
            tail = Path(log_path).read_text(errors="replace")[-2000:]
            raise EmuError(f"--cluster local: the Ray head {why}; its log ends:\n{tail}")
        time.sleep(0.1)


def _session(sid: int) -> list[int]:
    """The live processes of session ``sid`` (the head's and everything it started)."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                pids.append(int(entry.name))
    return pids


def _stop_head(proc: subprocess.Popen[bytes]) -> list[int]:
    """Stop the local head: SIGTERM (it stops its processes), then SIGKILL to whatever of
    its session is left; returns once none is, or what is left after STOP_TIMEOUT_S."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeouts.scaled(STOP_TIMEOUT_S))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + timeouts.scaled(STOP_TIMEOUT_S)
    while left := _session(proc.pid):
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            return left
        time.sleep(0.1)
    return []


def _reachable(address: str, cluster: str, timeout_s: float = 5.0) -> None:
    """Fail at once on a HOST:PORT nobody listens on (Ray itself waits for minutes)."""
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)),
                                 timeout=timeouts.scaled(timeout_s)).close()
    except OSError as e:
        raise EmuError(f"--cluster {cluster}: nothing answers at {address} ({e}); start the "
                       f"head with `ray start --head --resources={SLOT_RESOURCES}` "
                       "(README.md, \"Sweeps on a Ray cluster\")") from None


def _info(ray: Any, kind: str, t0: float, tmp: str | None = None,
          address: str | None = None) -> ClusterInfo:
    nodes, slots = describe(ray)
    return ClusterInfo(kind=kind, nodes=nodes, slots=slots,
                       started_s=time.monotonic() - t0, temp_dir=tmp, address=address)
