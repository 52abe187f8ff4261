"""Each transport's regime on a path, from its own one-packet RTT probes (calibration phase 1).

Its one job: the :class:`~workloads.calibration.samples.Regime` every other phase sizes its
transfers by. Per repetition, two chained one-packet messages (one full frame per lane),
the second one's post-to-ACK time (the first warms the path); the regime's rtt is their
median plus the frame's serialisation (workloads/calibration/record.py), with the transport's
frame (:func:`frame`), lanes (:func:`lanes`), the binding link's buffer and shaper
credit, and the RTO floor its core runs with on that path. The same on the main fabric
(host NICs bind) and over the DCI (its links bind).
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from emu.fabric import Fabric
from emu.kernel import htb_class
from emu.srv6 import srh_option
from topologies import MultiPlaneClos, ScaleAcross
from transports.core.wire import HEADER_LEN
from transports.plan import DEFAULT_CONFIG
from transports.testing import harness
from transports.testing.harness import Transfer
from workloads.calibration.samples import Regime
from workloads.calibration.session import Session
from workloads.calibration.transfers import checked, transport_config

if TYPE_CHECKING:
    from transports.core.mrc import MrcConfig
    from transports.core.rc import RcConfig

TCP_RTO_MIN_S = 0.2  # Linux's RTO floor (TCP_RTO_MIN), whatever the path


def lanes(spec: MultiPlaneClos | ScaleAcross, transport: str) -> int:
    """NICs one connection of ``transport`` uses at once (TCP: one, ECMP picks it)."""
    return 1 if transport == "tcp" else spec.planes


def frame(spec: MultiPlaneClos | ScaleAcross, transport: str, src: str,
          dst: str) -> tuple[int, int]:
    """(payload, wire bytes) of a full data packet of ``transport`` from src to dst."""
    if transport == "tcp":  # IPv6 + TCP with timestamps; Ethernet on the wire
        return spec.mtu - 40 - 20 - 12, spec.mtu + 14
    payload = int(DEFAULT_CONFIG["mrc"].get("mtu_payload", 8000))
    srh = len(srh_option(spec.paths(src, dst)[0])) if transport != "rc" else 0
    return payload, 14 + 40 + srh + 8 + HEADER_LEN + payload


def rtt_probe(fab: Fabric, spec: MultiPlaneClos | ScaleAcross, transport: str, src: str,
              dst: str) -> float:
    """One RTT probe of ``transport`` src -> dst on ``fab`` (no session needed): two
    chained messages of one full data packet per lane (:func:`frame`, :func:`lanes`), the
    second one's time from its post to its last part's send completion (the first warms
    the path up). EmuError if a transfer failed."""
    payload, _ = frame(spec, transport, src, dst)
    size = payload * lanes(spec, transport)
    transfers = [Transfer(src, dst, size), Transfer(src, dst, size, after=0)]
    _, parts = harness.plan_transfers(spec, transport, transfers)
    res = checked(harness.run_transfers(fab, transport, transfers,
                                        config=transport_config(transport)))
    sends = {m["msg"]: m["t"] for m in res.drivers[src]["messages"]
             if m["kind"] == "send" and m.get("t") is not None}
    posted = res.drivers[src]["posted"]
    ids = parts[1]
    return max(sends[i] for i in ids) - min(posted[str(i)] for i in ids)


def probe_rtt(s: Session, fab: Fabric, spec: MultiPlaneClos | ScaleAcross, src: str,
              dst: str, dci: bool) -> None:
    """Every transport's RTT probes src -> dst on ``fab`` (over the DCI: ``dci``), its
    regime set from their median after each repetition."""
    def probe(rep: int, t: str) -> None:
        rtt = rtt_probe(fab, spec, t, src, dst)
        a = s.samples(t)
        (a.dci_probes if dci else a.probes).append(rtt)
        _set_regime(s, spec, t, src, dst, dci)
        s.say(f"  rtt {'dci ' if dci else ''}{t} rep {rep}: probe {rtt * 1e3:.3f} ms")

    s.reps("rtt_dci" if dci else "rtt", probe, s.dci_transports() if dci else None)


def _set_regime(s: Session, spec: MultiPlaneClos | ScaleAcross, t: str, src: str, dst: str,
                dci: bool) -> None:
    a = s.samples(t)
    payload, wire = frame(spec, t, src, dst)
    if dci:  # the DCI links bind
        assert isinstance(spec, ScaleAcross)
        link, buffer = spec.dci_link_spec, spec.dci.queue_packets
    else:  # the host NICs bind
        assert isinstance(spec, MultiPlaneClos)
        link, buffer = spec.host_link, spec.host_link.queue_packets
    line = link.rate_mbit
    rtt_s = statistics.median(a.dci_probes if dci else a.probes) + wire * 8 / (line * 1e6)
    rto = TCP_RTO_MIN_S if t == "tcp" else _rto_floor(t, rtt_s)
    regime = Regime(
        rtt_s=rtt_s,
        payload_bytes=payload, frame_bytes=wire, line_mbit=line, lanes=lanes(spec, t),
        buffer_packets=buffer, binding="dci" if dci else "host_nic", rto_floor_s=rto,
        credit_bytes=lanes(spec, t) * htb_class(link, spec.mtu)["burst"])
    if dci:
        a.dci_regime = regime
    else:
        a.regime = regime


def _rto_floor(transport: str, rtt_s: float) -> float:
    """The RTO floor of a UDP core as the harness configures it, on a path of ``rtt_s``
    (an absolute part and a part in RTTs, transports/core/rto.py)."""
    from transports.core.rto import rto_floor

    kw: dict[str, Any] = DEFAULT_CONFIG[transport]
    cfg: RcConfig | MrcConfig
    if transport == "rc":
        from transports.core.rc import RcConfig

        cfg = RcConfig(**kw)
    else:
        from transports.core.mrc import MrcConfig

        cfg = MrcConfig(**kw)
    return rto_floor(cfg.rto_min, cfg.rto_min_rtts, rtt_s)
