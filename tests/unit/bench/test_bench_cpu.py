"""The CPU accounting of the transport bench, on driver reports (no root)."""

from __future__ import annotations

import os
import time

import pytest

from commands.bench.cpu import MachineCpu, driver_cpu, summary
from transports.testing.harness import Transfer, TransferResult


def report(cpu_user: float, cpu_sys: float, verify: float, wall: float, sent: int,
           wakeups: int) -> dict:
    return {"cpu_s": max(0.0, cpu_user + cpu_sys - verify), "cpu_user_s": cpu_user,
            "cpu_sys_s": cpu_sys, "verify_cpu_s": verify, "wall_s": wall,
            "wakeups": wakeups, "sent_per_ev": {"1": [sent // 2, sent - sent // 2]}}


def test_cpu_per_packet_leaves_the_byte_check_out():
    r = TransferResult("mrc", {"h0": report(0.010, 0.020, 0.0, 0.5, 1000, 100),
                               "h3": report(0.030, 0.010, 0.025, 0.6, 0, 400)},
                       [Transfer("h0", "h3", 8_000_000)])
    c = driver_cpu(r)
    assert c["data_packets"] == 1000
    # (0.030 + 0.015) s over 1000 packets; user 0.040 - 0.025 checking the bytes
    assert c["us_per_packet"] == pytest.approx(45.0)
    assert c["user_us"] == pytest.approx(15.0) and c["sys_us"] == pytest.approx(30.0)
    assert c["packets_per_core_s"] == round(1e6 / 45.0)
    assert c["wakeups_per_packet"] == pytest.approx(0.5)
    assert c["share"] == {"h0": pytest.approx(0.06), "h3": pytest.approx(0.025)}


def test_tcp_has_no_datagram_count_but_shares():
    d = {"cpu_s": 0.2, "wall_s": 1.0, "sent_per_ev": {}}
    c = driver_cpu(TransferResult("tcp", {"h0": d}, []))
    assert "us_per_packet" not in c and c["share"] == {"h0": 0.2}


def test_summary_ignores_unknown_values():
    assert summary([3.0, None, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0}
    assert summary([None]) == {"median": None, "min": None, "max": None}


def test_machine_cpu_sees_a_busy_core():
    m = MachineCpu()
    m.start()
    end = time.process_time() + 0.4
    while time.process_time() < end:  # one of the machine's CPUs busy for 0.4 s of CPU
        pass
    got = m.stop()
    assert 1.0 / os.cpu_count() - 0.1 <= got["busy"] <= 1.0  # type: ignore[operator]
    assert 0.0 <= got["softirq"] <= got["busy"] and 0.0 <= got["steal"] <= got["busy"]


def test_machine_cpu_needs_a_start():
    with pytest.raises(RuntimeError, match="before start"):
        MachineCpu().stop()
