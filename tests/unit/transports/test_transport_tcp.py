"""The kernel-TCP baseline without root: chained rounds over the loopback, TCP_INFO parsing.

Two ``run_tcp`` drivers (threads) on two loopback addresses of this namespace
(IPv4-mapped 127.0.0.1 and 127.0.0.2: the namespace is not changed). A round
``after`` the previous one is posted only once the receiver acknowledged it.
"""

import socket
import struct
import threading
import time
from dataclasses import replace

import pytest

from topologies import MultiPlaneClos
from transports.io.tcp import parse_tcp_info, run_tcp
from transports.plan import message_bytes
from transports.testing.harness import Transfer, plan_transfers

SPEC = MultiPlaneClos(planes=2, spines=2, leaves=2, hosts_per_leaf=2)
ADDR = {"h0": "::ffff:127.0.0.1", "h2": "::ffff:127.0.0.2"}


def free_port() -> int:
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
        s.bind(("::ffff:127.0.0.1", 0))
        return s.getsockname()[1]


def run_plans(transfers, config=None) -> dict[str, dict]:
    planned, _ = plan_transfers(SPEC, "tcp", transfers, deadline_s=20,
                                config={"port": free_port(), **(config or {})})
    # on this namespace's loopback addresses instead of the fabric's
    plans = {host: replace(plan, addr=ADDR[host],
                           conns=tuple(replace(c, peer_addr=ADDR[c.peer]) for c in plan.conns))
             for host, plan in planned.items()}
    barrier = threading.Barrier(len(plans))
    t0 = time.monotonic() + 0.2

    def start() -> float:
        barrier.wait()  # both listeners are up
        time.sleep(max(0.0, t0 - time.monotonic()))
        return t0

    out: dict[str, dict] = {}
    threads = [threading.Thread(target=lambda h=h, p=p: out.__setitem__(
        h, run_tcp(p, message_bytes, start))) for h, p in plans.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert set(out) == set(plans)
    return out


def by_msg(res: dict, kind: str) -> dict[int, dict]:
    return {m["msg"]: m for m in res["messages"] if m["kind"] == kind}


def test_chained_rounds_run_one_at_a_time():
    n = 6
    out = run_plans([Transfer("h0", "h2", 300_001 + i, after=i - 1 if i else None)
                     for i in range(n)])
    sends, recvs = by_msg(out["h0"], "send"), by_msg(out["h2"], "recv")
    assert len(sends) == len(recvs) == n
    assert all(m["ok"] for m in sends.values())
    assert all(m["ok"] and m["exact"] for m in recvs.values())
    posted = {int(k): v for k, v in out["h0"]["posted"].items()}
    ids = sorted(sends)
    for prev, nxt in zip(ids, ids[1:], strict=False):
        # posted only when the previous round was placed and acknowledged
        assert posted[nxt] >= sends[prev]["t"] >= recvs[prev]["t"] >= posted[prev]
    info = out["h0"]["tcp_info"]
    assert len(info) == 1
    (conn_info,) = info.values()
    assert conn_info["rto_ms"] >= 200  # Linux's TCP_RTO_MIN: nothing tunes it
    assert all("retrans" in m and m["rto_ms"] >= 200 for m in sends.values())
    assert len(out["h2"]["tcp_info_in"]) == 1  # the accepted end
    assert out["h0"]["netstat"]["Tcp:OutSegs"] >= n  # the namespace's counters moved


def test_unchained_messages_and_both_directions():
    out = run_plans([Transfer("h0", "h2", 1 << 20), Transfer("h0", "h2", 0),
                     Transfer("h2", "h0", 123_457)])
    assert all(m["ok"] and m.get("exact", True)
               for r in out.values() for m in r["messages"])
    assert len(by_msg(out["h2"], "recv")) == 2 and len(by_msg(out["h0"], "recv")) == 1
    # no ``after``: both of h0's messages were posted at the start
    assert len(out["h0"]["posted"]) == 2
    assert max(out["h0"]["posted"].values()) < min(
        m["t"] for m in by_msg(out["h0"], "send").values())


def test_congestion_control_is_settable():
    avail = open("/proc/sys/net/ipv4/tcp_available_congestion_control").read().split()
    if "reno" not in avail:
        pytest.skip("no reno")
    out = run_plans([Transfer("h0", "h2", 10_000)], {"cc": "reno"})
    assert all(m["ok"] for r in out.values() for m in r["messages"])


def test_parse_tcp_info_fields():
    raw = bytearray(248)
    raw[0], raw[1], raw[4] = 1, 4, 2
    struct.pack_into("IIII", raw, 8, 204_000, 0, 8940, 8940)
    struct.pack_into("I", raw, 32, 3)
    struct.pack_into("II", raw, 68, 1500, 700)
    struct.pack_into("I", raw, 80, 10)
    struct.pack_into("I", raw, 100, 17)
    struct.pack_into("IIII", raw, 144, 0, 900, 99, 4321)
    struct.pack_into("QII", raw, 208, 80_000, 1, 2)
    struct.pack_into("HHI", raw, 240, 5, 4, 1234)
    got = parse_tcp_info(bytes(raw))
    assert got == {"state": 1, "ca_state": 4, "backoff": 2, "rto_ms": 204.0, "snd_mss": 8940,
                   "lost": 3, "rtt_ms": 1.5, "rttvar_ms": 0.7, "snd_cwnd": 10,
                   "total_retrans": 17, "min_rtt_ms": 0.9, "data_segs_out": 4321,
                   "bytes_retrans": 80_000, "dsack_dups": 1, "reord_seen": 2, "total_rto": 5,
                   "total_rto_recoveries": 4, "total_rto_time_ms": 1234}
    # an older kernel's shorter answer: no RTO counters
    assert "total_rto" not in parse_tcp_info(bytes(raw[:232]))


def test_connection_stats_use_the_cores_names():
    from transports.io.tcp import conn_stats, send_deltas

    info = {"data_segs_out": 120, "total_retrans": 7, "dsack_dups": 3, "total_rto": 2}
    assert conn_stats(info) == {"tx_data_pkts": 120, "tx_retx": 7, "tx_retx_spurious": 3,
                                "rto": 2}
    assert conn_stats({}) == {"tx_data_pkts": 0, "tx_retx": 0, "tx_retx_spurious": 0, "rto": 0}
    before = {"total_retrans": 5, "dsack_dups": 1, "total_rto": 1}
    assert send_deltas(before, info) == {"retrans": 2, "retrans_spurious": 2, "rto": 1}
    assert send_deltas({"total_retrans": 5}, info) == {"retrans": 2}  # an older kernel


class _FakeSock:
    """A socket whose TCP_INFO answers are given in turn."""

    def __init__(self, answers: list[bytes]) -> None:
        self.answers = answers

    def getsockopt(self, level: int, opt: int, size: int) -> bytes:
        return self.answers.pop(0)


def _info(total_rto: int | None, retransmits: int = 0) -> bytes:
    raw = bytearray(256 if total_rto is not None else 240)
    raw[2] = retransmits
    if total_rto is not None:
        struct.pack_into("H", raw, 240, total_rto)
    return bytes(raw)


def test_rto_count_reads_total_rto_or_the_unrecovered_count():
    from transports.io.tcp import rto_count

    assert rto_count(_info(5, retransmits=1)) == 5  # Linux >= 6.7: the running total
    assert rto_count(_info(None, retransmits=2)) == 2  # older: since the last progress


def test_rto_polls_log_a_timeout_only_while_a_send_is_out():
    from transports.io.tcp import RTO_LOG_MAX, _Conn, _poll_rtos

    c = _Conn(_FakeSock([_info(1), _info(1), _info(3), _info(3)]), conn=1)
    assert _poll_rtos([c], 1.0) is False  # a timeout while nothing was out: the baseline
    c.inflight[7] = (None, {})
    assert _poll_rtos([c], 2.0) is True and c.rto_log == []
    _poll_rtos([c], 3.0)  # two timeouts since the last read: both at this read's time
    assert c.rto_log == [3.0, 3.0]
    _poll_rtos([c], 4.0)
    assert c.rto_log == [3.0, 3.0]
    big = _Conn(_FakeSock([_info(0), _info(500)]), conn=2)
    big.inflight[1] = (None, {})
    _poll_rtos([big], 1.0)
    _poll_rtos([big], 2.0)
    assert len(big.rto_log) == RTO_LOG_MAX
