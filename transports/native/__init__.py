"""The compiled helpers of the transports (Cython, built by scripts/setup.sh or
``make native``): per-packet mechanics (packet.pyx: a data datagram packed in one call,
the payload CRC, interval sets) and batched datagram I/O (batchio.pyx: recvmmsg with
kernel timestamps, sendmmsg).

There is no slow fallback: importing this package without the build fails at once with
``NotBuilt``, which names the command that makes it.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util

BUILD_HINT = ("run `sudo bash scripts/setup.sh` once (it installs Cython and ISA-L and builds "
              "them), or `make native` after changing transports/native/*.pyx")
MODULES = ("packet", "batchio")


class NotBuilt(ImportError):
    """A compiled helper is missing (never replaced by a slower Python one)."""


def _check_built() -> None:
    missing = [m for m in MODULES if not _compiled(f"{__name__}.{m}")]
    if missing:
        names = ", ".join(f"transports/native/{m}.pyx" for m in missing)
        raise NotBuilt(f"the transports' compiled helpers are not built ({names}): "
                       f"{BUILD_HINT}")


def _compiled(name: str) -> bool:
    spec = importlib.util.find_spec(name)
    return spec is not None and isinstance(spec.loader, importlib.machinery.ExtensionFileLoader)


_check_built()
