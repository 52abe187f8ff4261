"""Build the ports' eBPF object from its source in the repository, never shipped as a binary.

``object_path()`` returns the object for the current source: built once with clang into a
root-owned cache directory (``CACHE_DIR``, 0755, files 0644, written through emu/safefs.py)
under a name that carries the source's hash, so an edited source is rebuilt and an old
object is never loaded. ``scripts/setup.sh`` builds it at set-up (``python -m
emu.bpf.build``); a fabric that needs it builds it on first use otherwise.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

from emu import safefs
from emu.errors import EmuError

SOURCE = Path(__file__).with_name("port.c")
CACHE_DIR = Path(os.environ.get("SAE_BPF_CACHE", "/var/cache/scaleacross-emu/bpf"))
CLANG = "clang"
INSTALL_HINT = "apt-get install clang libbpf-dev (or: sudo bash scripts/setup.sh)"


def source_hash() -> str:
    return hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]


def compile_command(out: Path) -> list[str]:
    arch = sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"
    return [CLANG, "-O2", "-g", "-Wall", "-Werror", "-target", "bpf",
            f"-I/usr/include/{arch}", "-c", str(SOURCE), "-o", str(out)]


def missing_tools() -> str | None:
    """What is missing to build the object, or None."""
    if shutil.which(CLANG) is None:
        return f"clang not installed ({INSTALL_HINT})"
    if not Path("/usr/include/bpf/bpf_helpers.h").exists():
        return f"libbpf headers not installed ({INSTALL_HINT})"
    return None


def _trusted(path: Path, kind: int) -> bool:
    """``path`` is of ``kind`` (stat.S_IFDIR, S_IFREG) itself, not a link, owned by root
    and writable by no one else, so no other user can swap what the kernel loads."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    return (stat.S_IFMT(st.st_mode) == kind and st.st_uid == 0
            and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def cached() -> Path | None:
    """The built object of the current source if the cache holds it: the object and its
    directory root's, writable by root only, neither a symbolic link."""
    out = CACHE_DIR / f"port-{source_hash()}.o"
    if _trusted(CACHE_DIR, stat.S_IFDIR) and _trusted(out, stat.S_IFREG):
        return out
    return None


def object_path() -> Path:
    """The built object of the current source (built now if it is not in the cache)."""
    out = CACHE_DIR / f"port-{source_hash()}.o"
    if cached() is not None:
        return out
    missing = missing_tools()
    if missing:
        raise EmuError(f"cannot build the switch ports' eBPF program: {missing}")
    if os.geteuid() != 0:
        raise EmuError(f"the switch ports' eBPF program is not built yet ({out}): build it "
                       "as root (sudo python -m emu.bpf.build, or scripts/setup.sh)")
    safefs.mkdir_private(CACHE_DIR)
    if not _trusted(CACHE_DIR, stat.S_IFDIR):
        raise EmuError(f"{CACHE_DIR} is not a directory of root's that only root can write "
                       "(or it is a symbolic link): refusing to build the ports' eBPF "
                       "program into it (remove it, or set SAE_BPF_CACHE to another path)")
    tmp = safefs.private_temp_dir("sae-bpf-")
    try:
        built = tmp / "port.o"
        p = subprocess.run(compile_command(built), capture_output=True, text=True)
        if p.returncode != 0:
            raise EmuError(f"clang could not build {SOURCE}: {p.stderr.strip()[:2000]}")
        part = CACHE_DIR / f".{out.name}.{os.getpid()}"
        safefs.write_bytes(part, built.read_bytes())
        os.replace(part, out)  # atomic: a concurrent build writes the same bytes
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main() -> int:
    try:
        had = cached()
        path = object_path()
        print(f"switch ports' eBPF program already built: {path}" if had else
              f"built the switch ports' eBPF program: {path}")
    except EmuError as e:
        print(f"emu.bpf.build: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
