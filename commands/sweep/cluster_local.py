"""A one-node Ray cluster of our own (``--cluster local``): its head is a ``ray start
--head --block`` in a session of its own, bound to 127.0.0.1, with a fresh token in a
``mkdtemp`` directory (recorded for ``emu clean``), killed with this process, stopped
and removed at the end. See commands/sweep/cluster.py."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from commands.sweep.cluster_auth import AUTH_ENV, SLOT
from emu import registry, timeouts
from emu.errors import EmuError

__all__ = ["LOCAL_OBJECT_STORE_BYTES", "local_head"]

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# The object store only carries points' result files (a few MB each): a small one spares
# this machine's shared memory.
LOCAL_OBJECT_STORE_BYTES = 256 * 1024 * 1024
START_TIMEOUT_S = 90.0  # the local head is up within this (scaled; about 5 s here)
STOP_TIMEOUT_S = 30.0  # the local head stops within this, else it is killed


def _die_with_parent() -> None:  # pragma: no cover (runs in the child, before exec)
    # PR_SET_PDEATHSIG (1): the head is killed if this process dies, even by SIGKILL.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)


@contextmanager
def local_head(say: Callable[[str], None]) -> Iterator[tuple[str, str, str]]:
    """A one-node Ray head of our own (see the module docstring): yields (its directory,
    its GCS address, its token file); stopped, and the directory removed, at the end."""
    from ray._private.authentication.authentication_token_generator import (
        generate_new_authentication_token,
    )

    # A short path: Ray's Unix sockets live under it (at most 107 bytes).
    tmp = tempfile.mkdtemp(prefix="sae-ray-", dir="/tmp")
    proc: subprocess.Popen[bytes] | None = None
    left: list[int] = []
    with registry.recorded_tmpdir("sweep-ray", tmp):  # `emu clean` after a SIGKILL
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


