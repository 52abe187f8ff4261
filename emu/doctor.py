"""What this kernel and machine can do, and what the emulator will use for each.

Kernel features are probed for real in a throwaway network namespace (a forked
child that unshares its own), so a check never touches the host's network.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass

from emu.netns import CLONE_NEWNET, _libc


@dataclass(frozen=True)
class Capability:
    """One probed capability: whether it works, and the emulator's choice because of it."""

    name: str
    available: bool
    detail: str
    use: str


def _probe_in_fresh_netns() -> dict[str, tuple[bool, str]]:
    """Fork, unshare a network namespace, try each kernel feature, report back."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        out: dict[str, tuple[bool, str]] = {}
        try:
            if _libc.unshare(CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")
            out = _kernel_probes()
        except BaseException as e:  # noqa: BLE001 - report whatever failed to the parent
            out = {"namespaces": (False, f"{type(e).__name__}: {e}")}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return {k: (v[0], v[1]) for k, v in json.loads(data).items()}


def _kernel_probes() -> dict[str, tuple[bool, str]]:
    from pyroute2 import IPRoute

    out: dict[str, tuple[bool, str]] = {"namespaces": (True, "unshare(CLONE_NEWNET) works")}
    with IPRoute() as ipr:
        ipr.link("add", ifname="probe0", kind="veth", peer={"ifname": "probe1"})
        idx = ipr.link_lookup(ifname="probe0")[0]
        ipr.link("set", index=idx, state="up")
        ipr.addr("add", index=idx, address="fd5a:ffff::1", prefixlen=64)
        out["veth"] = (True, "veth pairs")

        def attempt(key: str, fn, ok: str) -> None:
            try:
                fn()
                out[key] = (True, ok)
            except Exception as e:  # noqa: BLE001 - any failure means "not available"
                out[key] = (False, f"{type(e).__name__}: {e}")

        attempt("seg6", lambda: ipr.route(
            "add", dst="fd5a:fffe::", dst_len=64, oif=idx,
            encap={"type": "seg6", "mode": "encap", "segs": ["fd5a:ffff::2"]}),
            "seg6 encap routes")
        attempt("seg6local", lambda: ipr.route(
            "add", dst="fd5a:fffd::1", dst_len=128, oif=idx,
            encap={"type": "seg6local", "action": "End"}), "seg6local End")
        attempt("htb", lambda: ipr.tc("add", "htb", idx, 0x10000, default=1), "HTB qdisc")
        attempt("pfifo", lambda: (
            ipr.tc("add-class", "htb", idx, 0x10001, parent=0x10000, rate="10mbit"),
            ipr.tc("add", "pfifo", idx, 0x20000, parent=0x10001, limit=10)), "pfifo qdisc")
        idx1 = ipr.link_lookup(ifname="probe1")[0]
        attempt("netem", lambda: ipr.tc("add", "netem", idx1, 0x10000, delay=1000),
                "netem qdisc")
        attempt("red", lambda: ipr.tc("add", "red", idx1, 0x20000, parent=0x10000,
                                      limit=100000, min=10000, max=30000, avpkt=1000,
                                      ecn=True), "RED qdisc with ECN")
        out["port_bpf"] = _port_bpf_probe(ipr, idx)
    out["nftables"] = _run_ok(["nft", "add", "table", "inet", "sae_probe"], "nft tables")
    if out["nftables"][0]:
        out["nft_numgen"] = _run_ok(
            ["nft", "add chain inet sae_probe c { type filter hook forward priority 0; } ; "
             "add rule inet sae_probe c numgen random mod 100 < 5 drop"], "numgen random")
        subprocess.run(["nft", "delete", "table", "inet", "sae_probe"], capture_output=True)
    else:
        out["nft_numgen"] = (False, "nft unavailable")
    out["tun"] = _tun_probe()
    try:  # in the forked child only: its own scheduling class, gone when it exits
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        out["sched_fifo"] = (True, "SCHED_FIFO priority 1")
    except OSError as e:
        out["sched_fifo"] = (False, f"sched_setscheduler: {e.strerror}")
    return out


def _port_bpf_probe(ipr, idx: int) -> tuple[bool, str]:
    """The switch ports' program (emu/bpf/port.c) built, verified and attached at a
    clsact egress with cls_bpf, as a fabric attaches it."""
    from emu.bpf.build import object_path
    from emu.bpf.libbpf import BpfObject
    from emu.errors import EmuError

    try:
        obj = BpfObject.load(str(object_path()))
    except EmuError as e:
        return False, str(e)[:300]
    try:
        ipr.tc("add", "clsact", idx)
        ipr.tc("add-filter", "bpf", idx, ":1", fd=obj.prog_fd("port_egress"),
               name="port_egress", parent=0xFFFFFFF3, classid=1, direct_action=True)
        return True, "clsact + cls_bpf: the ports' program verified and attached"
    except Exception as e:  # noqa: BLE001 - any failure means "not available"
        return False, f"{type(e).__name__}: {e}"
    finally:
        obj.close()


def _run_ok(cmd: list[str], ok: str) -> tuple[bool, str]:
    if shutil.which(cmd[0]) is None:
        return False, f"{cmd[0]} not installed"
    p = subprocess.run(cmd, capture_output=True, text=True)
    return (True, ok) if p.returncode == 0 else (False, p.stderr.strip()[:200])


def _tun_probe() -> tuple[bool, str]:
    import fcntl
    import struct

    try:
        fd = os.open("/dev/net/tun", os.O_RDWR)
    except OSError as e:
        return False, f"/dev/net/tun: {e.strerror}"
    try:
        tunsetiff = 0x400454CA
        fcntl.ioctl(fd, tunsetiff, struct.pack("16sH", b"saeprobe%d", 0x0002 | 0x1000))
        return True, "TAP devices"
    except OSError as e:
        return False, f"TUNSETIFF: {e.strerror}"
    finally:
        os.close(fd)


def _frr() -> tuple[bool, str]:
    daemons = [d for d in ("zebra", "bgpd", "bfdd") if not os.path.exists(f"/usr/lib/frr/{d}")]
    if daemons:
        return False, f"missing /usr/lib/frr/{{{','.join(daemons)}}} (apt-get install frr)"
    p = subprocess.run(["/usr/lib/frr/zebra", "--version"], capture_output=True, text=True)
    first = (p.stdout or p.stderr).splitlines()[0] if (p.stdout or p.stderr) else "FRR"
    return True, first.strip()


def _mininet() -> tuple[bool, str]:
    try:
        import mininet.net  # noqa: F401
        from mininet.net import VERSION
    except ImportError as e:
        return False, f"mininet not importable: {e} (apt-get install mininet)"
    if shutil.which("mnexec") is None:
        return False, "mnexec missing (apt-get install mininet)"
    return True, f"Mininet {VERSION}"


def check() -> list[Capability]:
    """Probe everything; needs root for the kernel probes (reported, not raised)."""
    caps: list[Capability] = []
    root = os.geteuid() == 0
    caps.append(Capability("root", root, "uid 0" if root else f"uid {os.geteuid()}",
                           "required to build fabrics" if root else "run emu as root (sudo)"))
    probes = _probe_in_fresh_netns() if root else {}

    def k(key: str) -> tuple[bool, str]:
        return probes.get(key, (False, "not probed (needs root)"))

    ok, d = _mininet()
    caps.append(Capability("mininet", ok, d, "nodes, namespaces, CLI" if ok else "cannot build"))
    for key in ("namespaces", "veth"):
        ok, d = k(key)
        caps.append(Capability(key, ok, d, "fabric nodes and links" if ok else "cannot build"))
    s6, s6d = k("seg6")
    s6l, s6ld = k("seg6local")
    caps.append(Capability("seg6", s6 and s6l, f"{s6d}; {s6ld}",
                           "static SRv6 source routes: SRH End SIDs, socket SRH"
                           if s6 and s6l else "no SRv6 paths: ECMP only"))
    h, hd = k("htb")
    f, fd = k("pfifo")
    caps.append(Capability("htb", h and f, f"{hd}; {fd}",
                           "link rates (HTB) and bounded switch buffers (pfifo)"
                           if h and f else "cannot shape links"))
    n, nd = k("netem")
    t, td = k("tun")
    caps.append(Capability("netem", n, nd, "DCI delay and loss via netem" if n else
                           ("DCI delay via a userspace TAP delay line" if t else
                            "no delay lines possible")))
    caps.append(Capability("tun", t, td, "userspace delay lines" if t
                           else "no userspace delay"))
    pb, pbd = k("port_bpf")
    red, redd = k("red")
    caps.append(Capability(
        "port signals", pb, f"{pbd}; RED: {redd}",
        "ECN marking, trimming and per-port counters at every switch port: tc eBPF "
        "(clsact + cls_bpf) with a virtual queue per port from its rate" if pb else
        ("no ECN or trimming: this emulator marks and trims with tc eBPF only (RED with ECN "
         "is here but not used); fabrics with ecn/trim set refuse to build" if red else
         "no ECN or trimming: fabrics with ecn/trim set refuse to build")))
    rt, rtd = k("sched_fifo")
    caps.append(Capability("realtime", rt, rtd, "delay-line relays and microburst senders at "
                           "real-time priority (timing to ~0.1-0.4 ms)" if rt else
                           "normal scheduling: delay lines and bursts jitter by milliseconds"))
    nf, nfd = k("nftables")
    ng, ngd = k("nft_numgen")
    caps.append(Capability("nftables", nf and ng, f"{nfd}; {ngd}",
                           "gray failures (random loss via numgen)" if nf and ng else
                           "no gray-failure injection"))
    fr, frd = _frr()
    caps.append(Capability("frr", fr, frd, "BGP/BFD control plane for the ECMP baseline"
                           if fr else "static ECMP only (no --control-plane bgp)"))
    caps.append(_timeouts())
    return caps


def _timeouts() -> Capability:
    """The readiness-wait scale in force (``emu.timeouts``): a setting, always usable."""
    from emu import timeouts

    scale = timeouts.timeout_scale()
    set_by = (f"{timeouts.ENV}={scale:g}" if os.environ.get(timeouts.ENV, "").strip()
              else f"{timeouts.ENV} not set")
    use = ("readiness waits as on a normal machine" if scale == 1.0 else
           f"readiness waits {scale:g}x longer (processes, BGP, routes, ports)")
    return Capability("timeout scale", True, set_by, use)


def report(caps: list[Capability], as_json: bool) -> str:
    """Render capabilities as a table or JSON."""
    if as_json:
        return json.dumps([asdict(c) for c in caps], indent=2)
    w = max(len(c.name) for c in caps)
    lines = [f"{'capability':<{w}}  ok   emulator uses", "-" * (w + 60)]
    for c in caps:
        lines.append(f"{c.name:<{w}}  {'yes' if c.available else 'NO ':<4} {c.use}")
        lines.append(f"{'':<{w}}       ({c.detail})")
    return "\n".join(lines)
