"""Files and directories written as root, safely.

``emu`` runs as root, often in directories other users can write to. Every file it
writes goes through this module, so that no write follows a symlink another user
planted (``O_NOFOLLOW`` on the last component; a result directory that is a symlink
is refused), a file meant to be new is created exclusively (``O_EXCL``), and a
results directory that already holds someone's files is written into only when the
user said so (``--force``). Temp, lock and state paths come from ``mkdtemp`` or
root-owned 0700 directories, never from a fixed name under /tmp.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from emu.errors import EmuError

__all__ = ["open_new", "open_write", "open_append", "write_text", "write_bytes",
           "write_json", "replace_text", "out_dir", "mkdir_private", "private_temp_dir",
           "copy_file", "results_dir", "read_input", "MAX_INPUT_BYTES", "OutDirNotEmpty"]

_FLAGS = os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
FILE_MODE = 0o644
DIR_MODE = 0o755


class OutDirNotEmpty(EmuError):
    """An output directory that already holds files this command did not write."""


def _open_fd(path: str | Path, flags: int, mode: int) -> int:
    try:
        fd = os.open(path, _FLAGS | flags, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise EmuError(f"{path} is a symbolic link: refusing to write through it "
                           "(remove it, or choose another path)") from None
        if e.errno == errno.EEXIST:
            raise EmuError(f"{path} already exists: refusing to overwrite it (remove it, "
                           "or choose another path)") from None
        if e.errno == errno.ENXIO:  # a FIFO nobody reads
            raise EmuError(f"{path} is not a regular file: refusing to write to it") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise EmuError(f"{path} is not a regular file: refusing to write to it")
    # O_NONBLOCK only guarded the open against a FIFO; regular files ignore it, but
    # clear it so the descriptor is plain for whoever inherits it (tcpdump).
    os.set_blocking(fd, True)
    return fd


def _wrap(fd: int, binary: bool) -> IO[Any]:
    if binary:
        return os.fdopen(fd, "wb")
    return os.fdopen(fd, "w", encoding="utf-8", newline="")


def open_new(path: str | Path, binary: bool = False, mode: int = FILE_MODE) -> IO[Any]:
    """A file that must not exist yet, created exclusively; never through a symlink."""
    return _wrap(_open_fd(path, os.O_CREAT | os.O_EXCL, mode), binary)


def open_write(path: str | Path, binary: bool = False, mode: int = FILE_MODE) -> IO[Any]:
    """A regular file created or truncated; never through a symlink."""
    return _wrap(_open_fd(path, os.O_CREAT | os.O_TRUNC, mode), binary)


def open_append(path: str | Path, binary: bool = False, mode: int = FILE_MODE) -> IO[Any]:
    """A regular file opened for appending (created if missing); never through a symlink."""
    return _wrap(_open_fd(path, os.O_CREAT | os.O_APPEND, mode), binary)


def write_text(path: str | Path, text: str) -> None:
    """``text`` into ``path`` (created or truncated, no symlink followed)."""
    with open_write(path) as f:
        f.write(text)


def write_bytes(path: str | Path, data: bytes) -> None:
    """``data`` into ``path`` (created or truncated, no symlink followed)."""
    with open_write(path, binary=True) as f:
        f.write(data)


def write_json(path: str | Path, obj: Any, **dump_kw: Any) -> None:
    """``obj`` as JSON into ``path`` atomically: a new temp file beside it, renamed."""
    replace_text(path, json.dumps(obj, **dump_kw) + "\n")


def replace_text(path: str | Path, text: str) -> None:
    """Write ``text`` to a fresh temp file in ``path``'s directory and rename it over
    ``path``: readers see the old or the new file, never half of one, and a symlink at
    ``path`` is replaced, not followed."""
    p = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def copy_file(src: str | Path, dest: str | Path) -> None:
    """Copy a regular file's bytes (the source not followed if it is a link either)."""
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise EmuError(f"{src} is a symbolic link: refusing to copy it") from None
        raise
    with os.fdopen(fd, "rb") as fin, open_write(dest, binary=True) as fout:
        while chunk := fin.read(1 << 20):
            fout.write(chunk)


def _real_dir(path: Path) -> bool:
    """True if ``path`` is a directory that is not itself a symlink."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def mkdir_private(path: str | Path, mode: int = DIR_MODE) -> Path:
    """Create ``path`` (and missing parents) as directories of our own; a path that
    exists must be a real directory, not a symlink to one."""
    p = Path(path)
    if not p.parent.exists() and p.parent != p:
        mkdir_private(p.parent, mode)
    try:
        os.mkdir(p, mode)
    except FileExistsError:
        if not _real_dir(p):
            raise EmuError(f"{p} exists and is not a directory (or is a symbolic link): "
                           "refusing to write into it") from None
    return p


def out_dir(path: str | Path, force: bool = False, flag: str = "--out") -> Path:
    """The results directory ``path`` for a command, created if missing.

    A directory that already holds entries is refused unless ``force`` (the user's
    ``--force``): a command never silently replaces files it did not write. A symlink
    is refused always; a directory others may write into is refused unless ``force``,
    since another user could plant links in it between our checks and our writes.
    """
    p = Path(path)
    existed = p.exists() or p.is_symlink()
    mkdir_private(p)
    if existed:
        st = os.lstat(p)
        if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX and not force:
            raise OutDirNotEmpty(f"{flag} {p} is writable by every user: choose a directory "
                                 "of your own, or pass --force to write into it anyway")
        entries = sorted(e.name for e in os.scandir(p))
        if entries and not force:
            shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
            raise OutDirNotEmpty(f"{flag} {p} already holds {len(entries)} entries ({shown}): "
                                 "choose a new directory, or pass --force to write into it "
                                 "(files of the same names are replaced)")
    return p


def results_dir(out: str | Path | None, stem: str, force: bool = False,
                flag: str = "--out") -> Path:
    """A command's results directory: ``out`` as the user gave it (see :func:`out_dir`),
    or a new ``results/STEM-YYYYmmdd-HHMMSS`` (``-2``, ``-3``, ... if that one exists)."""
    if out is not None:
        return out_dir(out, force=force, flag=flag)
    base = Path("results") / time.strftime(f"{stem}-%Y%m%d-%H%M%S")
    mkdir_private(base.parent)
    for n in range(1, 1000):
        p = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            os.mkdir(p, DIR_MODE)
        except FileExistsError:
            continue
        return p
    raise EmuError(f"could not create a new directory beside {base}: 999 exist already")


# The largest input file (experiment, sweep, claim, explore, timeline) read: the largest
# shipped one is a few KB; a file of megabytes is a mistake, or someone's attempt to
# make validation run for hours.
MAX_INPUT_BYTES = 1 << 20


def read_input(path: str | Path, what: str) -> str:
    """The text of an input file, refused (naming its size) past ``MAX_INPUT_BYTES``."""
    p = Path(path)
    with open(p, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > MAX_INPUT_BYTES:
            raise EmuError(f"{what} file {str(p)!r} is {size:,} bytes: at most "
                           f"{MAX_INPUT_BYTES:,} are read (input files are a few KB)")
        data = f.read(MAX_INPUT_BYTES + 1)
    if len(data) > MAX_INPUT_BYTES:  # it grew, or is not a regular file
        raise EmuError(f"{what} file {str(p)!r} holds more than {MAX_INPUT_BYTES:,} bytes")
    return data.decode("utf-8")


def private_temp_dir(prefix: str) -> Path:
    """A new 0700 directory of ours (``mkdtemp``) for temp, lock and state files."""
    return Path(tempfile.mkdtemp(prefix=prefix))
