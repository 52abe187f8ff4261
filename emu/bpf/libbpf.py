"""A loaded eBPF object, through the system's libbpf (ctypes): its programs' and maps' fds.

    obj = BpfObject.load(path)          # every program verified and loaded
    fd = obj.prog_fd("port_egress")     # for a tc filter (pyroute2, fd=...)
    obj.update("ports", key, value)     # a map element (bytes of the value's layout)
    obj.lookup("ports", key, size)
    obj.close()                         # programs stay while a tc filter holds them
    obj.prog_id("port_egress"); prog_exists(prog_id)  # the kernel's id: is it still loaded?

Only the calls this project needs; libbpf 1.x (Debian's libbpf1).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct

from emu.errors import EmuError

BPF_ANY = 0
BPF_F_LOCK = 4
_KEY = struct.Struct("=I")


def _lib() -> ctypes.CDLL:
    name = ctypes.util.find_library("bpf") or "libbpf.so.1"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError as e:
        raise EmuError(f"libbpf not found ({e}): apt-get install libbpf1") from None
    vp, cp, i = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
    sigs = {
        "bpf_object__open_file": (vp, [cp, vp]),
        "bpf_object__load": (i, [vp]),
        "bpf_object__close": (None, [vp]),
        "bpf_object__find_program_by_name": (vp, [vp, cp]),
        "bpf_object__find_map_by_name": (vp, [vp, cp]),
        "bpf_program__fd": (i, [vp]),
        "bpf_map__fd": (i, [vp]),
        "bpf_map_update_elem": (i, [i, vp, vp, ctypes.c_uint64]),
        "bpf_map_lookup_elem_flags": (i, [i, vp, vp, ctypes.c_uint64]),
        "bpf_prog_get_fd_by_id": (i, [ctypes.c_uint32]),
        "libbpf_set_print": (vp, [vp]),
    }
    for fn, (res, args) in sigs.items():
        f = getattr(lib, fn)
        f.restype, f.argtypes = res, args
    return lib


class BpfObject:
    """One loaded object (see the module docstring)."""

    def __init__(self, lib: ctypes.CDLL, obj: int, path: str) -> None:
        self._lib, self.path = lib, path
        self._obj: int | None = obj
        self._maps: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"BpfObject({self.path!r}, open={self._obj is not None})"

    @classmethod
    def load(cls, path: str) -> BpfObject:
        lib = _lib()
        obj = lib.bpf_object__open_file(path.encode(), None)
        if not obj:
            err = ctypes.get_errno()
            raise EmuError(f"libbpf could not open {path}: {os.strerror(err)}")
        rc = lib.bpf_object__load(obj)
        if rc:
            lib.bpf_object__close(obj)
            raise EmuError(f"the kernel refused the eBPF program {path}: "
                           f"{os.strerror(-rc if rc < 0 else rc)} (is cls_bpf available? "
                           "see `emu doctor`)")
        return cls(lib, obj, path)

    def prog_fd(self, name: str) -> int:
        prog = self._lib.bpf_object__find_program_by_name(self._obj, name.encode())
        if not prog:
            raise EmuError(f"{self.path} has no program {name!r}")
        return int(self._lib.bpf_program__fd(prog))

    def prog_id(self, name: str) -> int:
        """The kernel's id of program ``name`` (from its fd's /proc fdinfo)."""
        fd = self.prog_fd(name)
        for line in open(f"/proc/self/fdinfo/{fd}", encoding="ascii"):
            if line.startswith("prog_id:"):
                return int(line.split()[1])
        raise EmuError(f"{self.path}: program {name!r} has no prog_id in its fdinfo")

    def map_fd(self, name: str) -> int:
        fd = self._maps.get(name)
        if fd is None:
            m = self._lib.bpf_object__find_map_by_name(self._obj, name.encode())
            if not m:
                raise EmuError(f"{self.path} has no map {name!r}")
            fd = self._maps[name] = int(self._lib.bpf_map__fd(m))
        return fd

    def update(self, name: str, key: int, value: bytes, flags: int = BPF_ANY) -> None:
        k = ctypes.create_string_buffer(_KEY.pack(key))
        v = ctypes.create_string_buffer(value, len(value))
        if self._lib.bpf_map_update_elem(self.map_fd(name), k, v, flags):
            raise EmuError(f"bpf map {name}[{key}] update: {os.strerror(ctypes.get_errno())}")

    def lookup(self, name: str, key: int, size: int, flags: int = 0) -> bytes:
        k = ctypes.create_string_buffer(_KEY.pack(key))
        v = ctypes.create_string_buffer(size)
        if self._lib.bpf_map_lookup_elem_flags(self.map_fd(name), k, v, flags):
            raise EmuError(f"bpf map {name}[{key}] lookup: {os.strerror(ctypes.get_errno())}")
        return v.raw

    def close(self) -> None:
        if self._obj is not None:
            self._lib.bpf_object__close(self._obj)
            self._obj = None


def prog_exists(prog_id: int) -> bool:
    """Whether the kernel still holds program ``prog_id`` (something still refers to it:
    an fd or a tc filter)."""
    fd = _lib().bpf_prog_get_fd_by_id(prog_id)
    if fd >= 0:
        os.close(fd)
        return True
    return False
