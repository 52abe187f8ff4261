"""Calibration record v2 (workloads/calibration/record.py): fits, bootstrap, reductions, schema."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import replace

import pytest

from workloads.calibration import record as cal
from workloads.calibration import schema, stats
from workloads.calibration.samples import (
    BurstGeometry,
    CpuUse,
    LoadSample,
    RecoverySample,
    Regime,
    RoundsSample,
    StepsSample,
    TransferSample,
    TransportMeasurements,
    steps_from_training,
)
from workloads.calibration.schema import CalibrationError

IDLE = CpuUse((("h0", 0.1), ("h4", 0.2)), 2)
REGIME = Regime(rtt_s=0.01, payload_bytes=8000, frame_bytes=8150, line_mbit=10.0, lanes=2,
                buffer_packets=16, rto_floor_s=0.001, credit_bytes=36000)
SIZES = (100_000, 400_000, 1_600_000)


def _times(sizes, regime, eta, overhead, noise=()):
    """Completion times of the fit's model, plus per-sample noise."""
    out = []
    for i, s in enumerate(sizes):
        t = overhead + (s - regime.credit_bytes) * 8 / (eta * regime.binding_mbit * 1e6)
        out.append(t * (1 + (noise[i % len(noise)] if noise else 0.0)))
    return out


def _eta_samples(regime, sizes=SIZES, eta=0.8, overhead=0.02, reps=4, cpu=IDLE):
    samples = []
    for rep in range(reps):
        noise = (0.01 * (rep - 1.5), -0.005 * rep, 0.004 * (2 - rep))
        for s, t in zip(sizes, _times(sizes, regime, eta, overhead, noise), strict=True):
            samples.append(TransferSample(rep, s, t, cpu))
    return tuple(samples)


def _measurements(regime: Regime, k: float = 1.0, name: str = "dblp") -> TransportMeasurements:
    """A complete set of synthetic measurements; ``k`` scales every rate and byte count."""
    sizes = tuple(round(s * k) for s in SIZES)
    geo = BurstGeometry(on_s=0.05, every_s=0.3, sources=2, source_mbit=10.0 * k,
                        target_mbit=10.0 * k)
    healthy = tuple(RoundsSample(r, None, (0.10, 0.11 + 0.01 * r, 0.12), (1.0,) * 3, IDLE)
                    for r in range(4))
    bursts = tuple(RoundsSample(r, geo, (0.2 + 0.05 * r, 0.5 - 0.02 * r), (0.95, 0.9), IDLE,
                                burst_drops=3 + r) for r in range(4))
    load = tuple(LoadSample(r, fpu, (15.0 + r - fpu) * k, 19.6 * k, IDLE, 4 * int(fpu), 4)
                 for r in range(4) for fpu in (1.0, 2.0))
    recovery = tuple(RecoverySample(r, 1.0, 1.2 + 0.01 * r, 0.1, True, IDLE) for r in range(4))
    return TransportMeasurements(
        regime=regime, eta=_eta_samples(regime, sizes), load=load, healthy_rounds=healthy,
        burst_rounds=bursts, recovery=recovery, dblp_tolerance=0.1 if name == "dblp" else None,
        steps=(StepsSample(0, 90, 100), StepsSample(1, 95, 100)) if name == "dblp" else ())


def test_fit_recovers_eta_and_overhead_exactly():
    sizes = [60_000, 150_000, 600_000, 3_000_000, 150_000]
    for credit in (0.0, 36_000.0):
        secs = [0.003 + (s - credit) * 8 / (0.8 * 20e6) for s in sizes]
        fit = stats.fit_eta(sizes, secs, 20.0, credit)
        assert fit.eta == pytest.approx(0.8, rel=1e-9)
        assert fit.overhead_s == pytest.approx(0.003, abs=1e-12)


def test_fewer_than_three_sizes_is_an_error_naming_it():
    with pytest.raises(CalibrationError, match="at least 3 distinct message sizes, got 2"):
        stats.fit_eta([1000, 1000, 20000], [0.1, 0.1, 0.2], 10.0)
    with pytest.raises(CalibrationError, match=r"largest message >= 10x the smallest"):
        stats.fit_eta([1000, 2000, 5000], [0.1, 0.2, 0.3], 10.0)


def test_eta_section_values_and_overhead_in_rtts():
    sec = cal.transport_record("mrc", TransportMeasurements(
        regime=REGIME, eta=_eta_samples(REGIME, reps=3, overhead=0.02)))
    eta = sec["eta"]
    assert eta["value"] == pytest.approx(0.8, rel=0.02)
    assert eta["overhead_rtts"] == pytest.approx(2.0, abs=0.3)  # 0.02 s / 0.01 s
    assert eta["binding_mbit"] == pytest.approx(2 * 10.0 * 8000 / 8150)
    assert [p["message_bdp"] for p in eta["points"]] == pytest.approx(
        [s / REGIME.bdp_bytes for s in SIZES])
    assert sec["regime"]["message_bdp"] == pytest.approx(
        [SIZES[0] / REGIME.bdp_bytes, SIZES[-1] / REGIME.bdp_bytes])


def test_points_within_the_burst_credit_are_left_out_with_the_reason():
    small = TransferSample(0, 20_000, 0.001, IDLE)  # < 1.5 x 36000 B
    sec = cal.transport_record("mrc", TransportMeasurements(
        regime=REGIME, eta=(small, *_eta_samples(REGIME))))
    p = sec["eta"]["points"][0]
    assert p["message_bytes"] == 20_000 and "burst credit" in p["excluded"]
    assert sec["regime"]["message_bdp"][0] == pytest.approx(SIZES[0] / REGIME.bdp_bytes)


def test_cpu_bound_points_are_excluded_from_the_fit_with_the_reason():
    busy = CpuUse((("h0", 0.95), ("h4", 0.3)), 2)
    crowded = CpuUse(tuple((f"h{i}", 0.3) for i in range(8)), 2)  # 2.4 >= 0.9 x 2 cores
    assert "h0 used 0.95 core" in busy.bound()
    assert "2.40 of the machine's 2 cores" in crowded.bound()
    assert IDLE.bound() is None
    sizes = (*SIZES, 6_400_000)
    clean = _eta_samples(REGIME, sizes, eta=0.8, overhead=0.02)
    # the largest size's rep 1 ran CPU-bound (and slowly): that size leaves the fit
    spoilt = tuple(replace(s, seconds=s.seconds * 3, cpu=busy)
                   if s.message_bytes == sizes[-1] and s.rep == 1 else s for s in clean)
    sec = cal.transport_record("mrc", TransportMeasurements(regime=REGIME, eta=spoilt))
    ref = cal.transport_record("mrc", TransportMeasurements(
        regime=REGIME, eta=tuple(s for s in clean if s.message_bytes != sizes[-1])))
    point = sec["eta"]["points"][-1]
    assert point["excluded"] == "rep 1: CPU-bound: the driver on h0 used 0.95 core"
    assert point["cpu_cores"] == 0.95 and len(point["seconds"]) == 4
    assert sec["eta"]["value"] == ref["eta"]["value"]
    assert any("eta" in e and "CPU-bound" in e for e in sec["excluded"])
    assert sec["regime"]["cpu_cores_max"] == 0.2  # kept measurements only


def test_bootstrap_contains_the_value_and_is_seeded(monkeypatch):
    sec1 = cal.transport_record("mrc", _measurements(REGIME, name="mrc"), seed=3)
    sec2 = cal.transport_record("mrc", _measurements(REGIME, name="mrc"), seed=3)
    assert sec1 == sec2
    # the record's seed reaches every bootstrap (4 repetitions resample onto so few
    # distinct values that two seeds' intervals may well coincide: see the seeds)
    seen: dict[int, list[int]] = {3: [], 4: []}
    real = cal.bootstrap
    for seed in seen:
        monkeypatch.setattr(cal, "bootstrap", lambda *a, _s=seed, **k: (
            seen[_s].append(k["seed"]), real(*a, **k))[1])
        cal.transport_record("mrc", _measurements(REGIME, name="mrc"), seed=seed)
    assert len(seen[3]) == len(seen[4]) >= 5
    assert all(a != b for a, b in zip(seen[3], seen[4], strict=True))
    # on 20 distinct values, two seeds draw different intervals; one seed the same
    xs = [0.1 * i + 0.013 * (i % 3) for i in range(20)]
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    assert stats.bootstrap(xs, mean, seed=1) == stats.bootstrap(xs, mean, seed=1)
    assert stats.bootstrap(xs, mean, seed=1) != stats.bootstrap(xs, mean, seed=2)
    for e in (sec1["eta"], *sec1["load_balance"], *sec1["tail_inflation"],
              sec1["recovery"]["link_cut"] | {"value": sec1["recovery"]["link_cut"][
                  "recovery_rtts"]}):
        assert e["lo"] <= e["value"] <= e["hi"], e
    lo, hi = stats.bootstrap([1.0, 2.0, 3.0, 4.0], lambda xs: sum(xs) / len(xs), seed=1)
    assert 1.0 <= lo < 2.5 < hi <= 4.0  # the percentile interval itself, not widened
    assert stats.bootstrap([1.0, 2.0, 3.0, 4.0], lambda xs: sum(xs) / len(xs), seed=1,
                         value=5.0) == (lo, 5.0)  # widened to contain a value outside
    assert stats.bootstrap([], lambda xs: 1.0, seed=1) == (None, None)
    with pytest.raises(CalibrationError, match="resamples=10"):
        stats.bootstrap([1.0], lambda xs: 1.0, seed=1, resamples=10)


def test_load_tail_recovery_and_dblp_reductions_exactly():
    geo = BurstGeometry(on_s=0.05, every_s=0.3, sources=2, source_mbit=10.0, target_mbit=10.0)
    m = TransportMeasurements(
        regime=REGIME,
        load=(LoadSample(0, 1.0, 10.0, 20.0, IDLE, 4, 4), LoadSample(1, 1.0, 15.0, 20.0, IDLE,
                                                                       4, 4)),
        healthy_rounds=(RoundsSample(0, None, (1.0, 2.0, 3.0), (1.0,) * 3, IDLE),),
        burst_rounds=(RoundsSample(0, geo, (10.0,), (0.8,), IDLE, burst_drops=0),),
        recovery=(RecoverySample(0, 1.0, 1.5, 0.2, True, IDLE),), dblp_tolerance=0.25)
    sec = cal.transport_record("dblp", m)
    lb = sec["load_balance"][0]
    assert lb["value"] == pytest.approx(0.625)
    assert lb["balls_into_bins"] == pytest.approx(1 - 0.75 ** 4)
    tail = sec["tail_inflation"][0]
    assert tail["value"] == pytest.approx(5.0)  # p99 of [10] / p50 of [1, 2, 3]
    assert tail["burst_rtts"] == pytest.approx(5.0)  # 0.05 s / 0.01 s
    assert tail["burst_excess_buffers"] == pytest.approx(10e6 / 8 * 0.05 / (16 * 8150))
    assert tail["delay_spike_only"] is True and tail["rounds"] == 1
    rec = sec["recovery"]["link_cut"]
    assert rec["lost_rtts"] == pytest.approx(50.0)
    assert rec["convergence_s"] == pytest.approx(0.2)
    assert rec["recovery_rtts"] == pytest.approx(30.0)
    assert rec["recovery_rtos"] == pytest.approx(300.0)
    assert sec["dblp"]["delivered_fraction"]["value"] == pytest.approx(0.8)
    assert sec["dblp"]["steps_ratio"] is None
    assert sec["dblp"]["steps_ratio_reason"] == "no training results given"
    assert stats.balls_into_bins(8, 4) == pytest.approx(4 * (1 - 0.75 ** 8) / 4)
    assert stats.balls_into_bins(2, 8) == pytest.approx(8 * (1 - (7 / 8) ** 2) / 2)


def test_recovery_waiting_for_an_unmeasured_convergence_is_excluded():
    m = TransportMeasurements(regime=REGIME, recovery=(
        RecoverySample(0, 1.0, 1.5, None, True, IDLE), RecoverySample(1, 1.0, 1.3, 0.1, True,
                                                                      IDLE)))
    sec = cal.transport_record("rc", m)
    assert sec["recovery"]["link_cut"]["lost_rtts"] == pytest.approx(30.0)
    assert any("rep 0: control-plane convergence not measured" in e for e in sec["excluded"])


def test_recovery_leaves_out_the_wait_for_the_retry_that_got_through():
    # RTT 0.01 s. Rep 0: the routes moved at 0.2 s, the retry that got through left at
    # 0.35 s, 0.5 s lost: 0.15 s of restart. Rep 1: a retry before convergence (0.05 s)
    # and none after (the routes moved under traffic): 0.3 - 0.1 = 0.2 s.
    m = TransportMeasurements(regime=REGIME, recovery=(
        RecoverySample(0, 1.0, 1.5, 0.2, True, IDLE, retry_s=0.35),
        RecoverySample(1, 1.0, 1.3, 0.1, True, IDLE, retry_s=0.05)))
    rec = cal.transport_record("rc", m)["recovery"]["link_cut"]
    assert rec["lost_rtts"] == pytest.approx(40.0)
    assert rec["timer_wait_s"] == pytest.approx((0.15 + 0.0) / 2)
    assert rec["recovery_rtts"] == pytest.approx((15.0 + 20.0) / 2)
    # a transport that routes around the cut itself: its whole loss is its recovery
    mrc = TransportMeasurements(regime=REGIME, recovery=(
        RecoverySample(0, 1.0, 1.05, None, False, IDLE, retry_s=0.02),))
    rec = cal.transport_record("mrc", mrc)["recovery"]["link_cut"]
    assert rec["recovery_rtts"] == pytest.approx(5.0) and rec["timer_wait_s"] is None


def test_the_retry_is_the_first_timeout_after_convergence_within_the_loss():
    from workloads.calibration.recovery import logged_retry

    log = {1: [9.0, 10.05, 10.15, 10.35, 11.0], 2: [10.2]}  # monotonic times; cut at 10.0
    assert logged_retry(log, 10.0, 0.12, 0.5) == pytest.approx(0.15)
    assert logged_retry(log, 10.0, 0.16, 0.5) == pytest.approx(0.2)  # another connection's
    assert logged_retry(log, 10.0, 0.4, 0.5) is None  # none after convergence in the loss
    assert logged_retry(log, 10.0, None, 0.1) == pytest.approx(0.05)  # no control plane
    assert logged_retry({}, 10.0, 0.1, 0.5) is None
    assert logged_retry({1: [9.5]}, 10.0, None, 0.5) is None  # before the cut


def _dimensionless(obj, path=""):
    """Every value of a transport section except the dimensional ones, by path."""
    dimensional = {"bdp_bytes", "buffer_packets", "binding_mbit", "message_bytes", "excluded"}
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k not in dimensional:
                out.update(_dimensionless(v, f"{path}.{k}"))
        return out
    if isinstance(obj, list):
        out = {}
        for i, v in enumerate(obj):
            out.update(_dimensionless(v, f"{path}[{i}]"))
        return out
    return {path: obj}


@pytest.mark.parametrize("k", [3.0, 0.25])
def test_scaling_rates_sizes_and_buffers_leaves_every_dimensionless_output(k):
    base = cal.transport_record("dblp", _measurements(REGIME), seed=7)
    scaled_regime = replace(REGIME, line_mbit=REGIME.line_mbit * k,
                            buffer_packets=round(REGIME.buffer_packets * k),
                            credit_bytes=round(REGIME.credit_bytes * k))
    scaled = cal.transport_record("dblp", _measurements(scaled_regime, k), seed=7)
    a, b = _dimensionless(base), _dimensionless(scaled)
    assert a.keys() == b.keys()
    for key, v in a.items():
        if isinstance(v, float):
            assert b[key] == pytest.approx(v, rel=1e-6), key
        else:
            assert b[key] == v, key
    assert scaled["regime"]["bdp_bytes"] == pytest.approx(base["regime"]["bdp_bytes"] * k)
    assert len(scaled["excluded"]) == len(base["excluded"])


def _record():
    return cal.calibration_record(
        fabric={"planes": 2, "spines": 4, "leaves": 2, "hosts_per_leaf": 4, "rate_mbit": 10.0,
                "fabric_rate_mbit": 10.0, "queue_packets": 16, "mtu": 9000,
                "nominal_gbit": 100.0, "dci": None},
        transports={"mrc": _measurements(REGIME, name="mrc"), "dblp": _measurements(REGIME)},
        command="emu calibrate --quick", versions={"python": "3.11"}, host={"cpus": 2},
        generated=1.0)


def test_record_round_trips_through_json(tmp_path):
    rec = _record()
    assert rec["format"] == "scaleacross-emu/calibration/2"
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(rec, allow_nan=False))
    assert schema.load(path) == rec
    assert rec["transports"]["dblp"]["dblp"]["steps_ratio"]["value"] == pytest.approx(0.925)
    assert rec["transports"]["mrc"]["dblp"] is None


def test_validation_names_the_bad_field(tmp_path):
    rec = _record()
    bad = json.loads(json.dumps(rec))
    bad["transports"]["mrc"]["eta"]["value"] = math.inf
    with pytest.raises(CalibrationError, match=r"record.transports.mrc.eta.value=inf"):
        schema.validate(bad)
    bad = json.loads(json.dumps(rec))
    bad["transports"]["mrc"]["regime"]["colour"] = "blue"
    with pytest.raises(CalibrationError, match=r"regime: unknown keys \['colour'\]"):
        schema.validate(bad)
    bad = json.loads(json.dumps(rec))
    bad["format"] = "scaleacross-emu/calibration/1"
    with pytest.raises(CalibrationError, match="calibration/2"):
        schema.validate(bad)
    bad = json.loads(json.dumps(rec))
    bad["transports"]["mrc"]["eta"]["overhead_rtts_hi"] = -100.0
    with pytest.raises(CalibrationError, match=r"eta: overhead_rtts=.* is outside"):
        schema.validate(bad)
    bad = json.loads(json.dumps(rec))
    del bad["transports"]["mrc"]["recovery"]["link_cut"]["lo"]
    with pytest.raises(CalibrationError, match=r"missing keys \['lo'\]"):
        schema.validate(bad)
    (tmp_path / "x.json").write_text("{")
    with pytest.raises(CalibrationError, match="not JSON"):
        schema.load(tmp_path / "x.json")


def test_regime_validation_names_the_value():
    with pytest.raises(CalibrationError, match="rtt_s=0"):
        replace(REGIME, rtt_s=0)
    with pytest.raises(CalibrationError, match="binding='wan'"):
        replace(REGIME, binding="wan")


def _training_records(steps_mrc, steps_dblp, bounded=False):
    def meta(label, name, dblp=None):
        return {"type": "meta", "label": label, "experiment": {
            "workload": {"model": "tiny_lm", "target_loss": 2.5, "target_accuracy": None},
            "transport": {"name": name, "dblp": dblp}}}

    recs = [meta("lm/mrc", "mrc"), meta("lm/dblp", "dblp", {"bounded_gather": bounded})]
    for label, hit in (("lm/mrc", steps_mrc), ("lm/dblp", steps_dblp)):
        for step in range(9, 60, 10):
            recs.append({"type": "eval", "label": label, "rep": 0, "step": step,
                         "loss": 2.4 if step + 1 >= hit else 3.0})
    return recs


def test_steps_ratio_from_training_results():
    samples, reason = steps_from_training(_training_records(40, 30))
    assert reason is None and samples == (StepsSample(0, 30, 40),)
    samples, reason = steps_from_training(_training_records(40, 30, bounded=True))
    assert samples == () and "no DBLP run" in reason


def test_load_entries_are_per_flows_and_qps_and_tails_carry_the_healthy_p50():
    # RC measured with 1 and 4 queue pairs per plane at the same flows per uplink: two
    # entries, each with the hashed flows (connections x QPs) the explorer's ECMP law uses.
    load = (LoadSample(0, 1.0, 8.0, 20.0, IDLE, 4, 4), LoadSample(1, 1.0, 9.0, 20.0, IDLE, 4, 4),
            LoadSample(0, 1.0, 16.0, 20.0, IDLE, 16, 4, qps=4),
            LoadSample(1, 1.0, 17.0, 20.0, IDLE, 16, 4, qps=4))
    geo = BurstGeometry(on_s=0.05, every_s=0.3, sources=2, source_mbit=10.0, target_mbit=10.0)
    m = TransportMeasurements(
        regime=REGIME, load=load,
        healthy_rounds=(RoundsSample(0, None, (1.0, 2.0, 3.0), (1.0,) * 3, IDLE),),
        burst_rounds=(RoundsSample(0, geo, (10.0,), (1.0,), IDLE, burst_drops=2),))
    sec = cal.transport_record("rc", m)
    one, four = sec["load_balance"]
    assert (one["qps_per_connection"], four["qps_per_connection"]) == (1, 4)
    assert one["value"] == pytest.approx(0.425) and four["value"] == pytest.approx(0.825)
    assert (one["ecmp_flows"], four["ecmp_flows"], four["ecmp_uplinks"]) == (4, 16, 4)
    assert four["balls_into_bins"] == pytest.approx(stats.balls_into_bins(16, 4))
    assert sec["tail_inflation"][0]["healthy_p50_rtts"] == pytest.approx(2.0 / 0.01)
    rec = {"format": schema.FORMAT, "generated": 0.0, "command": "x", "versions": {},
           "host": {}, "fabric": {"planes": 2, "spines": 4, "leaves": 2, "hosts_per_leaf": 4,
                                  "rate_mbit": 10.0, "fabric_rate_mbit": 10.0,
                                  "queue_packets": 16, "mtu": 9000, "nominal_gbit": 1.0,
                                  "dci": None},
           "transports": {"rc": schema.plain(sec)}}
    schema.validate(rec)
    # a record written before these keys existed is still valid without them
    for e in rec["transports"]["rc"]["load_balance"]:
        for k in ("qps_per_connection", "ecmp_flows", "ecmp_uplinks"):
            e.pop(k)
    schema.validate(rec)
    rec["transports"]["rc"]["load_balance"][0]["unknown"] = 1
    with pytest.raises(CalibrationError, match="unknown"):
        schema.validate(rec)


def test_switches_are_recorded_and_measurements_with_them_are_memoised():
    # the session keeps a memo across writes: measurements carrying the ports' counters
    # must stay hashable
    sw = (("ce_seen", 3), ("dropped", 0), ("marked", 5), ("mechanism", "tc-bpf"),
          ("packets", 40), ("signals", "ecn+trim"), ("trimmed", 2))
    m = dataclasses.replace(_measurements(REGIME, name="mrc"), switches=sw)
    memo: dict = {}
    kw = dict(fabric={"planes": 2, "spines": 4, "leaves": 2, "hosts_per_leaf": 4,
                      "rate_mbit": 10.0, "fabric_rate_mbit": 10.0, "queue_packets": 16,
                      "mtu": 9000, "nominal_gbit": 100.0, "dci": None},
              transports={"mrc": m}, command="emu calibrate", versions={"python": "3.11"},
              host={"cpus": 2}, generated=1.0, memo=memo)
    first = cal.calibration_record(**kw)
    assert first["transports"]["mrc"]["switches"]["trimmed"] == 2
    assert cal.calibration_record(**kw) == first and len(memo) == 1
