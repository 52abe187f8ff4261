"""What the emulator created, recorded so that a crashed run can be cleaned up.

Every fabric writes a state file under /run/scaleacross-emu before it creates
anything and removes it after teardown; a namespace is recorded there (its node's
pid and namespace inode) before its ``sae-`` name is bound under /run/netns, and a
temp dir before anything is written into it. ``emu clean`` removes exactly what
the state files of dead runs record: processes inside those namespaces, those
names, those temp dirs and the state files. A ``sae-`` name no state file records
is not provably ours (another tool may use the prefix) and is left alone.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from emu import safefs
from emu.errors import EmuError
from emu.netns import NETNS_RUN_DIR, ns_inode, unbind_name

log = logging.getLogger(__name__)

STATE_DIR = Path("/run/scaleacross-emu")
NETNS_PREFIX = "sae-"


def netns_name(fabric: str, node: str) -> str:
    """The /run/netns name of ``node`` of fabric ``fabric``."""
    return f"{NETNS_PREFIX}{node}" if fabric == "emu" else f"{NETNS_PREFIX}{fabric}-{node}"


@dataclass
class FabricState:
    """The on-disk record of one running fabric."""

    fabric: str
    owner_pid: int
    owner_start: int = 0  # the owner's start time (clock ticks): guards against pid reuse
    namespaces: dict[str, dict] = field(default_factory=dict)  # node -> {netns, pid, inode}
    tmpdirs: list[str] = field(default_factory=list)
    built: bool = False  # the build completed (links, routes and control plane up)

    @property
    def path(self) -> Path:
        return STATE_DIR / f"fabric-{self.fabric}.json"

    def save(self) -> None:
        state_dir()
        safefs.write_json(self.path, self.__dict__, indent=1)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)

    @classmethod
    def load(cls, path: Path) -> FabricState:
        return cls(**json.loads(path.read_text()))


def state_dir() -> Path:
    """STATE_DIR, created 0700 if missing; refused unless it is a real directory owned by
    this user that no one else can write to (``emu clean`` acts on what it records)."""
    try:
        STATE_DIR.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    st = os.lstat(STATE_DIR)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise EmuError(f"{STATE_DIR} is not a directory of this user's that only it can write "
                       f"to (owner uid {st.st_uid}, mode {stat.filemode(st.st_mode)}): "
                       "another user may have planted it; remove it and run again")
    return STATE_DIR


@contextmanager
def recorded_tmpdir(tag: str, path: str | Path) -> Iterator[None]:
    """Record the temp dir ``path`` (just made, still empty) for ``emu clean`` while the
    body runs: a process killed meanwhile (SIGKILL) leaves a record, and the next clean
    removes the directory. The record goes at the end; the directory is the caller's."""
    pid = os.getpid()
    st = FabricState(f"{tag}-{pid}", pid, start_time(pid) or 0, tmpdirs=[str(path)])
    st.save()
    try:
        yield
    finally:
        st.remove()


def start_time(pid: int) -> int | None:
    """A process's start time in clock ticks, None if it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[19])


def pid_alive(pid: int) -> bool:
    """True if ``pid`` runs (a zombie is dead)."""
    return start_time(pid) is not None


def owner_alive(st: FabricState) -> bool:
    """True if the process that built fabric ``st`` still runs (this one included)."""
    started = start_time(st.owner_pid)
    return started is not None and (not st.owner_start or started == st.owner_start)


def running_states() -> list[FabricState]:
    """State files of fabrics whose owner process is still alive."""
    return [s for s in _states() if owner_alive(s)]


def stale_states() -> list[FabricState]:
    """State files left by runs that died without tearing down."""
    return [s for s in _states() if not owner_alive(s)]


def _states() -> list[FabricState]:
    if not STATE_DIR.is_dir():
        return []
    state_dir()  # never act on records another user could have written
    out = []
    for p in sorted(STATE_DIR.glob("fabric-*.json")):
        try:
            out.append(FabricState.load(p))
        except (ValueError, TypeError, OSError):
            log.warning("unreadable state file %s removed", p)
            p.unlink(missing_ok=True)
    return out


def processes_in(inodes: set[int]) -> list[int]:
    """Pids of every process whose network namespace is one of ``inodes``."""
    me = os.getpid()
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != me and ns_inode(entry.name) in inodes:
            pids.append(int(entry.name))
    return pids


def kill_all(pids: list[int], timeout: float = 2.0) -> None:
    """SIGKILL ``pids`` and wait (bounded) until they are gone."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    pending = set(pids)
    while pending and time.monotonic() < deadline:
        for pid in list(pending):
            try:
                # Reap our own children; others disappear when their parent reaps them.
                if os.waitpid(pid, os.WNOHANG)[0] == pid or not pid_alive(pid):
                    pending.discard(pid)
            except ChildProcessError:
                if not pid_alive(pid):
                    pending.discard(pid)
        if pending:
            time.sleep(0.005)


def kill_in(inodes: set[int], timeout: float = 5.0) -> int:
    """SIGKILL every process in the namespaces ``inodes`` until a scan finds none (a
    process that was being started as the first scan ran shows up in a later one);
    bounded by ``timeout``. Returns how many were killed."""
    killed = 0
    deadline = time.monotonic() + timeout
    while inodes:
        pids = processes_in(inodes)
        if not pids:
            break
        kill_all(pids, max(0.1, deadline - time.monotonic()))
        killed += len(pids)
        if time.monotonic() > deadline:
            log.warning("processes still starting in a fabric's namespaces after %.0f s",
                        timeout)
            break
    return killed


@dataclass
class CleanReport:
    """What a clean removed."""

    fabrics: list[str] = field(default_factory=list)  # fabrics removed entirely
    processes: int = 0
    namespaces: list[str] = field(default_factory=list)
    tmpdirs: list[str] = field(default_factory=list)
    built: bool = False  # the build completed (links, routes and control plane up)
    skipped_running: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)  # names that could not be removed, and why
    left: list[str] = field(default_factory=list)  # fabrics kept for a retry, and why

    @property
    def empty(self) -> bool:
        return not (self.fabrics or self.processes or self.namespaces or self.tmpdirs
                    or self.left)


def clean(force: bool = False, only: str | None = None) -> CleanReport:
    """Remove everything left by dead runs (all runs with ``force``); never anything else.

    ``only`` restricts the clean to one fabric name (used before a build of that name).
    """
    report = CleanReport()
    states = _states()
    inodes: set[int] = set()
    chosen: list[FabricState] = []
    for st in states:
        if only is not None and st.fabric != only:
            continue
        if owner_alive(st) and not force:
            report.skipped_running.append(f"{st.fabric} (pid {st.owner_pid})")
            continue
        chosen.append(st)
        for rec in st.namespaces.values():
            # Our namespace only: its node still runs (the recorded inode guards against a
            # recycled pid) or our name still holds it (never a name someone else holds).
            if rec.get("inode") and (ns_inode(rec["pid"]) == rec["inode"] or owns_name(rec)):
                inodes.add(rec["inode"])
        for d in st.tmpdirs:
            if Path(d).exists():
                shutil.rmtree(d, ignore_errors=True)
                report.tmpdirs.append(d)
    report.processes = kill_in(inodes)
    for st in chosen:
        removed, stuck = unbind_owned(list(st.namespaces.values()))
        report.namespaces += removed
        if stuck:  # its state file stays, for a retry
            report.stuck += [why for _, why in stuck]
            report.left.append(f"{st.fabric} ({len(stuck)} namespace names not removed)")
        else:
            report.fabrics.append(st.fabric)
            st.remove()
    return report


def owns_name(rec: dict) -> bool:
    """True if the /run/netns name of namespace record ``rec`` ({netns, pid, inode}) is
    bound to the namespace we created: a name someone else holds, or one we never got
    to bind, is not ours to remove."""
    try:
        ino = os.stat(NETNS_RUN_DIR / rec["netns"]).st_ino
    except OSError:
        return False
    return bool(rec.get("inode")) and ino == rec["inode"]


def unbind_owned(recs: list[dict]) -> tuple[list[str], list[tuple[str, str]]]:
    """Remove from /run/netns the names of namespace records ``recs`` that are ours
    (:func:`owns_name`), going on past one that cannot be: the names removed, and the
    (name, why) of each one left."""
    removed: list[str] = []
    stuck: list[tuple[str, str]] = []
    for name in sorted(rec["netns"] for rec in recs if owns_name(rec)):
        try:
            if unbind_name(name):
                removed.append(name)
        except OSError as e:
            stuck.append((name, f"{NETNS_RUN_DIR / name}: {e.strerror}"))
    return removed, stuck


STUCK_HINT = (f"a mount over {NETNS_RUN_DIR} may hide them (`findmnt -R {NETNS_RUN_DIR}` "
              f"shows it): `umount {NETNS_RUN_DIR}` once, then run `emu clean` again")
