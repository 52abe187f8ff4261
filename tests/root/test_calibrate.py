"""`emu calibrate` on a tiny fabric (root): one transport, 3 sizes, 3 repetitions."""

from __future__ import annotations

import statistics

import pytest

from emu.kernel import htb_class
from topologies import LinkSpec, MultiPlaneClos
from workloads.calibration.calibrate import Calibration
from workloads.calibration.plan import Plan
from workloads.calibration.schema import load

pytestmark = pytest.mark.root

SPEC = MultiPlaneClos(planes=2, spines=2, leaves=2, hosts_per_leaf=1,
                      host_link=LinkSpec(10.0, 16), fabric_link=LinkSpec(10.0, 16))
PLAN = Plan(transports=("mrc",), reps=3, eta_bdp=(4.0, 12.0, 48.0), measure=("eta",))


def test_tiny_calibration_writes_a_consistent_v2_record(tmp_path):
    out = tmp_path / "calibration.json"
    lines: list[str] = []
    rec = Calibration(out, PLAN, say=lines.append, spec=SPEC, dci_spec=None,
                      name="caltest").run()
    assert load(out) == rec  # written, valid, and what run() returned
    assert rec["fabric"]["planes"] == 2 and rec["fabric"]["dci"] is None
    assert list(rec["transports"]) == ["mrc"]
    mrc = rec["transports"]["mrc"]
    eta = mrc["eta"]
    assert 0 < eta["value"] <= 1.05, eta
    assert eta["lo"] <= eta["value"] <= eta["hi"]
    assert mrc["regime"]["binding"] == "host_nic"
    # The floor the core runs with on this path: an absolute part and one in RTTs.
    from transports.core.mrc import MrcConfig
    from transports.core.rto import rto_floor

    c = MrcConfig()
    assert mrc["regime"]["rto_floor_s"] == pytest.approx(
        rto_floor(c.rto_min, c.rto_min_rtts, mrc["regime"]["rtt_s"]))
    points = eta["points"]
    assert [len(p["seconds"]) for p in points] == [3, 3, 3]
    assert all(p["excluded"] is None for p in points)
    assert [round(p["message_bdp"]) for p in points] == [4, 12, 48]
    # the fitted line passes every size's median time within a tenth of the largest
    # (credit: 2 jumbo frames per plane port pass unshaped; the ramp of MRC's window
    # makes mid sizes a little slower than the line)
    credit = SPEC.planes * htb_class(SPEC.host_link, SPEC.mtu)["burst"]
    rtt = mrc["regime"]["rtt_s"]
    medians = [statistics.median(p["seconds"]) for p in points]
    for p, measured in zip(points, medians, strict=True):
        model = (eta["overhead_rtts"] * rtt
                 + (p["message_bytes"] - credit) * 8 / (eta["value"] * eta["binding_mbit"] * 1e6))
        assert abs(model - measured) <= 0.1 * max(medians), (p, model)
    assert "load_balance: not measured" in mrc["excluded"]
    assert any("eta mrc rep 2" in line for line in lines)
