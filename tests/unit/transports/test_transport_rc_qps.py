"""RC with several queue pairs per plane (one connection split over N RC 5-tuples, as
production RoCE's NCCL_IB_QPS_PER_CONNECTION): the harness's plan and the lanes' cores
on the fake network, without root."""

import pytest

from emu.errors import EmuError
from topologies import MultiPlaneClos
from transports.core.rc import RcConfig, RcCore
from transports.plan import message_bytes
from transports.testing.fakenet import PathSpec
from transports.testing.harness import Transfer, plan_transfers

SPEC = MultiPlaneClos(planes=2, spines=2, leaves=2, hosts_per_leaf=2)


@pytest.mark.parametrize("qps", [1, 3])
def test_a_connection_is_split_over_qps_per_plane_each_its_own_5_tuple(qps):
    plans, parts = plan_transfers(SPEC, "rc", [Transfer("h0", "h2", 100_003)], qps=qps)
    conns = plans["h0"].conns
    assert len(conns) == len(parts[0]) == SPEC.planes * qps
    # every plane carries qps of them, between that plane's addresses
    for plane in range(SPEC.planes):
        on = [c for c in conns if c.src_addr == str(SPEC.plane_address("h0", plane))]
        assert len(on) == qps
        assert {c.peer_addr for c in on} == {str(SPEC.plane_address("h2", plane))}
    assert len({c.sport for c in conns}) == len(conns)  # distinct 5-tuples for ECMP
    sizes = [m.size for m in plans["h0"].sends]
    assert sum(sizes) == 100_003 and max(sizes) - min(sizes) <= 1  # striped evenly


def test_qps_is_refused_where_there_are_no_queue_pairs():
    with pytest.raises(EmuError, match="qps=2"):
        plan_transfers(SPEC, "mrc", [Transfer("h0", "h2", 1)], qps=2)
    with pytest.raises(EmuError, match="qps=0"):
        plan_transfers(SPEC, "rc", [Transfer("h0", "h2", 1)], qps=0)


def test_every_lane_delivers_its_stripe_over_its_own_path():
    """The planned lanes of one message, each an RC core pair on a path of its own (the
    spines ECMP hashed them onto differ in delay and loss): every stripe arrives whole,
    and the stripes put back in lane order are the message."""
    from transports.testing.fakenet import FakeNet

    plans, parts = plan_transfers(SPEC, "rc", [Transfer("h0", "h2", 250_001)], qps=2)
    sends = {m.msg: m for m in plans["h0"].sends}
    net = FakeNet(seed=5)
    cfg = RcConfig(rto_min=200e-6, rto_init=1e-3, window_pkts=32)
    bufs = {}
    for lane, mid in enumerate(parts[0]):
        a, b = f"a{lane}", f"b{lane}"
        spec = PathSpec(delay=(10 + 7 * lane) * 1e-6, loss=0.01 * (lane % 2))
        net.connect(a, RcCore(lane + 1, cfg, 1), b, RcCore(lane + 1, cfg, 2), [spec])
        data = message_bytes(sends[mid].seed, sends[mid].size)
        bufs[mid] = (data, bytearray(len(data)))
        net.post_recv(b, mid, bufs[mid][1])
        net.post_send(a, mid, data)
    net.run(10.0, stop=lambda: all(len(net.done[f"b{i}"]) == 1 for i in range(4)))
    assert all(c.ok for lane in range(4) for c in net.done[f"b{lane}"])
    whole = b"".join(bytes(bufs[mid][1]) for mid in parts[0])
    assert whole == b"".join(bufs[mid][0] for mid in parts[0])
    assert len(whole) == 250_001
