"""Ray's token authentication as a sweep checks it: which address ``--cluster auto`` may
trust, this machine's token, and the probe that a head must pass before it is joined
(refuse a request carrying no token, answer one carrying ours). See
commands/sweep/cluster.py for where each is used."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from emu import timeouts
from emu.errors import EmuError

__all__ = ["AUTH_ENV", "FIX_AUTH", "FIX_TOKEN", "JOIN_TIMEOUT_S", "SLOT", "SLOT_RESOURCES",
           "auth_env", "auto_address", "check_cluster", "probe_auth", "refresh_auth",
           "require_token_auth", "token"]

SLOT = "fabric_slot"  # the custom resource: one per node, one per point's task
SLOT_RESOURCES = '\'{"fabric_slot": 1}\''
JOIN_TIMEOUT_S = 20.0  # a head's GCS answers the probe within this (scaled)
AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
FIX_AUTH = ("restart every node of it with token authentication: RAY_AUTH_MODE=token and "
            "the cluster's token in RAY_AUTH_TOKEN_PATH (or /root/.ray/auth_token), as "
            "docs/concepts/sweeps.md shows")
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


def token() -> str | None:
    """This process's Ray token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or
    ~/.ray/auth_token), None if there is none."""
    from ray._raylet import AuthenticationTokenLoader  # type: ignore[attr-defined]

    loader = AuthenticationTokenLoader.instance()
    if not loader.has_token(ignore_auth_mode=True):
        return None
    return str(loader.get_raw_token(ignore_auth_mode=True))


def require_token_auth(address: str, cluster: str, token: str) -> None:
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
                       f"start --head --resources={SLOT_RESOURCES}` "
                       "(docs/concepts/sweeps.md) or use --cluster local")
    if got[1:] != ("answered",):
        raise EmuError(f"--cluster {cluster}: the head at {address} refused this machine's "
                       f"Ray token ({', '.join(got[1:]) or 'no answer'}): {FIX_TOKEN}")



@contextmanager
def auth_env(values: dict[str, str | None]) -> Iterator[None]:
    """This process's Ray authentication settings (environment; None unsets) for the
    body, Ray's cached view of them refreshed on the way in and out."""
    old = {k: os.environ.get(k) for k in AUTH_ENV}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        refresh_auth()
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        refresh_auth()


def refresh_auth() -> None:
    # Ray caches the mode (RayConfig) and the token: the config first, then the token
    # (the order Ray's own tests use, so no thread reloads a token in the wrong mode).
    from ray._raylet import (  # type: ignore[attr-defined]  # not in Ray's stub
        AuthenticationTokenLoader,
        Config,
    )

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()

