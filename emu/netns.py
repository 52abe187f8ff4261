"""Entering network namespaces from this process, without forking.

pyroute2's own ``netns=`` support forks a helper per socket; a fabric has dozens
of namespaces, so the builder instead switches this thread into a namespace with
setns(2), opens what it needs (netlink sockets, UDP sockets, sysctl files: all
bind to the namespace current at creation), and switches back.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CLONE_NEWNET = 0x40000000
MS_BIND = 4096
MS_REC = 16384
MS_SHARED = 1 << 20
MNT_DETACH = 2
NETNS_RUN_DIR = Path("/run/netns")

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def setns(fd: int) -> None:
    """Move the calling thread into the network namespace open at ``fd``."""
    _check(_libc.setns(fd, CLONE_NEWNET), "setns")


@contextmanager
def entered(ns_fd: int) -> Iterator[None]:
    """Run the body inside the namespace ``ns_fd``; always return to the original one."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        setns(ns_fd)
        try:
            yield
        finally:
            setns(home)
    finally:
        os.close(home)


def ns_inode(pid: int | str) -> int | None:
    """Inode of a process's network namespace (its identity), None if it is gone."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def write_sysctl(key: str, value: str | int) -> None:
    """Write ``net.*`` sysctl ``key`` (dotted form) in the current namespace."""
    path = "/proc/sys/" + key.replace(".", "/")
    with open(path, "w") as f:
        f.write(str(value))


_run_dir_shared = False


def share_run_dir() -> None:
    """Make /run/netns a shared mount of itself, as ``ip netns add`` does the first time.

    Were it a plain directory when our names are bound, the first ``ip netns add``
    afterwards (any tool's) would bind-mount /run/netns over itself and hide our names'
    mounts beneath: they could then be neither unmounted nor unlinked (EBUSY) until
    that mount went. Done once per process; a no-op when it is already a mount.
    """
    global _run_dir_shared
    if _run_dir_shared:
        return
    NETNS_RUN_DIR.mkdir(parents=True, exist_ok=True)
    d = str(NETNS_RUN_DIR).encode()
    if _libc.mount(b"none", d, None, MS_SHARED | MS_REC, None) != 0:
        err = ctypes.get_errno()
        if err != errno.EINVAL:  # EINVAL: not a mount point yet
            raise OSError(err, f"mount --make-rshared {NETNS_RUN_DIR}: {os.strerror(err)}")
        _check(_libc.mount(d, d, None, MS_BIND | MS_REC, None),
               f"mount --bind {NETNS_RUN_DIR} {NETNS_RUN_DIR}")
        _check(_libc.mount(b"none", d, None, MS_SHARED | MS_REC, None),
               f"mount --make-rshared {NETNS_RUN_DIR}")
    _run_dir_shared = True


def bind_name(pid: int, name: str) -> Path:
    """Give the namespace of ``pid`` a name under /run/netns (as ``ip netns`` does)."""
    share_run_dir()
    target = NETNS_RUN_DIR / name
    fd = os.open(target, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0o444)
    os.close(fd)
    src = f"/proc/{pid}/ns/net".encode()
    if _libc.mount(src, str(target).encode(), None, MS_BIND, None) != 0:
        err = ctypes.get_errno()
        target.unlink(missing_ok=True)
        raise OSError(err, f"bind mount of netns for {name}: {os.strerror(err)}")
    return target


def unbind_name(name: str) -> bool:
    """Remove a /run/netns name; the namespace dies once no process is left in it."""
    target = NETNS_RUN_DIR / name
    if _libc.umount2(str(target).encode(), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOENT):
            raise OSError(err, f"umount {target}: {os.strerror(err)}")
    try:
        target.unlink()
    except FileNotFoundError:
        return False
    return True
