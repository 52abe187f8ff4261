"""The explorer's inputs and outputs: calibration records (v1 and v2), published tables,
the command line writing every output without root."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from explorer.calibration import (
    DEFAULT_CALIBRATION,
    LAW_CALIBRATIONS,
    Interval,
    load_calibration,
    parse_calibration,
)
from explorer.spec import SpecError
from explorer.validate import load_table, spearman

ROOT = Path(__file__).resolve().parents[3]

V2 = {
    "format": "scaleacross-emu/calibration/2",
    "transports": {
        "mrc": {
            "regime": {"rtt_s": 4e-4, "payload_bytes": 8000, "buffer_bdp": 2.0,
                       "message_bdp": [0.5, 40.0], "flows_per_uplink": [1.0, 2.0],
                       "burst_rtts": [5.0, 50.0], "burst_excess_buffers": [1.0, 3.0]},
            "eta": {"value": 0.9, "lo": 0.88, "hi": 0.93, "overhead_rtts": 1.5,
                    "overhead_rtts_lo": 1.0, "overhead_rtts_hi": 2.0},
            "eta_dci": None,
            "load_balance": [{"flows_per_uplink": 2.0, "value": 0.97, "lo": 0.95, "hi": 0.99},
                             {"flows_per_uplink": 1.0, "value": 0.99, "lo": 0.98, "hi": 1.0},
                             {"flows_per_uplink": 4.0, "value": 0.5, "lo": 0.4, "hi": 0.6,
                              "excluded": "cpu-bound"}],
            "tail_inflation": [
                {"burst_rtts": 5.0, "burst_excess_buffers": 1.0, "value": 1.4, "lo": 1.3,
                 "hi": 1.6, "delay_spike_only": False},
                {"burst_rtts": 50.0, "burst_excess_buffers": 3.0, "value": 3.0, "lo": 2.5,
                 "hi": 3.4, "delay_spike_only": False},
                {"burst_rtts": 50.0, "burst_excess_buffers": 0.1, "value": 1.1, "lo": 1.0,
                 "hi": 1.2, "delay_spike_only": True}],
            "recovery": {"link_cut": {"recovery_rtts": 3.0, "lo": 2.0, "hi": 5.0,
                                      "recovery_rtos": None}},
            "excluded": ["load_balance 4 flows: cpu-bound"]},
        "rc": {"regime": {}, "eta": {"value": 0.8}, "recovery": {"link_cut": {
            "recovery_rtts": 20.0, "lo": 10.0, "hi": 30.0, "recovery_rtos": 2.0}}},
        "dblp": {"regime": {}, "eta": {"value": 0.9},
                 "tail_inflation": [{"burst_rtts": 5.0, "burst_excess_buffers": 1.0,
                                     "value": 1.1, "lo": 1.0, "hi": 1.2}],
                 "dblp": {"tolerance": 0.05, "delivered_fraction": {"value": 0.97, "lo": 0.96,
                                                                     "hi": 0.98},
                          "steps_ratio": None, "steps_ratio_reason": "no training results"}},
    },
}


def test_v2_record_is_read_with_intervals_and_exclusions():
    cal = parse_calibration(V2, "x.json")
    mrc = cal.get("mrc")
    assert mrc.eta == Interval(0.9, 0.88, 0.93)
    assert mrc.overhead_rtts == Interval(1.5, 1.0, 2.0)
    # Excluded (CPU-bound) entries leave the law; the rest is sorted by flows.
    assert [p.flows_per_uplink for p in mrc.load_balance] == [1.0, 2.0]
    assert mrc.load_balance[0].efficiency == Interval(0.99, 0.98, 1.0)
    assert mrc.recovery_rtts == Interval(3.0, 2.0, 5.0)
    assert mrc.rtt_s == 4e-4 and mrc.flows_per_uplink.hi == 2.0
    # An RC record whose FIFOs can drop (or that says nothing of them) is rc_lossy.
    rc = cal.get("rc_lossy")
    assert rc.recovery_rtos == Interval(2.0, 1.0, 3.0)  # scaled with the RTT interval
    assert cal.dblp is not None and cal.dblp.tolerance == 0.05
    assert cal.dblp.steps_ratio is None and "dblp" not in cal.transports
    with pytest.raises(SpecError, match="no calibration for transport 'tcp'"):
        cal.get("tcp")


def _fabric(queue: int) -> dict:
    return {"planes": 2, "spines": 4, "leaves": 2, "hosts_per_leaf": 4, "queue_packets": queue,
            "rate_mbit": 10.0}


def test_rc_is_lossless_only_where_its_fifos_hold_every_window():
    # 16 QPs meet at an uplink: RC's 64-packet windows need 1024 packets of FIFO.
    lb = [{"flows_per_uplink": 4.0, "qps_per_connection": 4, "value": 0.7, "lo": 0.6,
           "hi": 0.8, "ecmp_flows": 64, "ecmp_uplinks": 4}]
    rc = {"eta": {"value": 0.99}, "load_balance": lb}
    for queue, name in ((1024, "rc"), (1023, "rc_lossy"), (16, "rc_lossy")):
        doc = {"format": "scaleacross-emu/calibration/2", "fabric": _fabric(queue),
               "transports": {"rc": rc}}
        assert list(parse_calibration(doc).transports) == [name]


def test_later_records_override_figure_by_figure(tmp_path):
    full = dict(V2)
    load_only = {"format": "scaleacross-emu/calibration/2", "fabric": _fabric(16),
                 "transports": {"mrc": {"eta": {"value": None}, "load_balance": [
                     {"flows_per_uplink": 1.0, "qps_per_connection": 1, "value": 0.5,
                      "lo": 0.4, "hi": 0.6}]}}}
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(full))
    b.write_text(json.dumps(load_only))
    mrc = load_calibration([a, b]).get("mrc")
    assert mrc.eta == Interval(0.9, 0.88, 0.93)  # kept from the first
    assert [p.efficiency.value for p in mrc.load_balance] == [0.5]  # replaced
    assert mrc.recovery_rtts == Interval(3.0, 2.0, 5.0)
    assert load_calibration([b, a]).get("mrc").load_balance[0].efficiency.value == 0.99


def test_v1_record_is_read_without_intervals():
    v1 = {"format": "scaleacross-emu/calibration/1", "variants": {
        "mrc": {"transport": "mrc", "line_rate": {"fraction": 0.7},
                "tail_inflation": {"value": 2.0}, "lost_rtts_per_failure": 12.0},
        "gloo": {"transport": "gloo", "line_rate": {"fraction": 0.6},
                 "tail_inflation": {"value": None}, "lost_rtts_per_failure": None}}}
    cal = parse_calibration(v1, "v1.json")
    assert cal.get("mrc").eta == Interval.exact(0.7)
    assert cal.get("mrc").recovery_rtts == Interval.exact(12.0)
    assert cal.get("tcp").eta.value == 0.6  # gloo runs on TCP
    assert any("version 1" in n for n in cal.notes)


@pytest.mark.parametrize("doc, match", [
    ({"format": "nope"}, "not a calibration record"),
    ({"format": "scaleacross-emu/calibration/2", "transports": []}, "must be a table"),
    ({"format": "scaleacross-emu/calibration/2", "transports": {"mrc": {
        "eta": {"value": 0.9, "lo": 0.95, "hi": 1.0}}}}, "does not contain"),
])
def test_bad_records_are_refused(doc, match):
    with pytest.raises(SpecError, match=match):
        parse_calibration(doc)


def test_shipped_calibration_loads_every_transport_with_hashes():
    cal = load_calibration()
    assert cal.files[0][0] == str(DEFAULT_CALIBRATION)
    assert [p for p, _ in cal.files[1:]] == [str(p) for p in LAW_CALIBRATIONS]
    assert all(len(h) == 64 for _, h in cal.files)
    for name in ("mrc", "rc", "rc_lossy", "tcp"):
        tc = cal.get(name)
        assert 0 < tc.eta.lo <= tc.eta.value <= tc.eta.hi <= 1.05
        assert tc.rtt_s and tc.rtt_s > 0
        assert tc.load_balance and tc.tail and tc.recovery_rtts is not None
    # the law records: RC with 1 and 4 QPs, at 1 to 16 hashed flows per uplink
    qps = {p.qps for p in cal.get("rc").load_balance}
    assert qps == {1, 4} and cal.get("rc").fabric.queue_packets >= 1024
    # the switch ports each eta was measured on: MRC's mark and trim, lossy RC's do not;
    # lossless RC's eta comes from a law record that did not record its ports
    assert cal.get("mrc").switches.startswith("ecn+trim ports (tc-bpf)")
    assert "% trimmed" in cal.get("mrc").switches
    assert cal.get("rc_lossy").switches.startswith("plain ports")
    assert cal.get("rc").switches is None


def test_switch_ports_follow_the_record_an_eta_comes_from(tmp_path):
    sw = {"signals": "ecn+trim", "mechanism": "tc-bpf", "packets": 1000, "marked": 20,
          "trimmed": 1, "dropped": 3, "ce_seen": 15, "marked_fraction": 0.02,
          "trimmed_fraction": 0.001, "dropped_fraction": 0.003}
    with_ports = json.loads(json.dumps(V2))
    with_ports["transports"]["mrc"]["switches"] = sw
    load_only = {"format": "scaleacross-emu/calibration/2", "fabric": _fabric(16),
                 "transports": {"mrc": {"eta": {"value": None}, "load_balance": [
                     {"flows_per_uplink": 1.0, "qps_per_connection": 1, "value": 0.5,
                      "lo": 0.4, "hi": 0.6}]}}}
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    a.write_text(json.dumps(with_ports))
    b.write_text(json.dumps(load_only))
    c.write_text(json.dumps(V2))  # an eta measured without a record of its ports
    assert load_calibration([a]).get("mrc").switches == (
        "ecn+trim ports (tc-bpf): 2 % of 1000 packets marked, 0.1 % trimmed, 0.3 % dropped")
    assert load_calibration([a, b]).get("mrc").switches.startswith("ecn+trim")  # kept
    assert load_calibration([a, c]).get("mrc").switches is None  # its eta is c's


def test_spearman_hand_values():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # Ties take average ranks: x ranks 1.5 1.5 3, y 1 2 3.
    assert spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(0.8660254, rel=1e-6)


def test_published_tables_load_with_every_row():
    tables = sorted((ROOT / "explorer" / "data" / "published").glob("*.toml"))
    assert len(tables) >= 2
    for path in tables:
        t = load_table(path)
        assert len(t.rows) >= 3
        assert sum(r.fit for r in t.rows) <= 1
        for r in t.rows:
            assert r.measured > 0 and r.config.cluster.dcs == 1


def test_table_errors_name_the_row(tmp_path):
    f = tmp_path / "t.toml"
    f.write_text('metric = "tflops_per_gpu"\nflops = "megatron"\n[[row]]\nlabel = "a"\n'
                 'measured = 1.0\n"placement.tpp" = 2\n')
    with pytest.raises(SpecError, match=r"row 1 \(a\).*placement.tpp"):
        load_table(f)


def _cli(args, tmp_path, user=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "commands.cli", *args]
    if user is not None:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)


def test_cli_writes_every_output_without_root():
    # A directory under /tmp (world-traversable), so that nobody can reach it.
    with tempfile.TemporaryDirectory() as tmp:
        _cli_outputs(Path(tmp))


def _cli_outputs(tmp_path: Path) -> None:
    spec = tmp_path / "space.toml"
    shutil.copy(ROOT / "experiments" / "explore" / "small_2dc.toml", spec)
    out = tmp_path / "out"
    out.mkdir()
    user = None
    if os.geteuid() == 0 and shutil.which("setpriv"):
        # Prove it: run as nobody, which may write only the output directory.
        user = "65534"
        os.chown(tmp_path, 65534, 65534)
        os.chown(out, 65534, 65534)
    r = _cli(["explore", str(spec), "--out", str(out), "--top", "3", "--json"], tmp_path,
             user)
    assert r.returncode == 0, r.stderr
    for name in ("points.csv.gz", "pareto_cost.csv", "pareto_energy.csv", "top.csv",
                 "pareto.png", "breakdown.png", "summary.json"):
        assert (out / name).stat().st_size > 0, name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["counts"]["feasible"] > 0
    with gzip.open(out / "points.csv.gz", "rt") as f:
        rows = f.read().splitlines()
    assert len(rows) - 1 == summary["counts"]["feasible"]
    header = rows[0].split(",")
    assert "time_to_train_s" in header and "placement.tp" in header
    # No NaN or inf ever reaches an output (files or what was printed).
    texts = [r.stdout, "\n".join(rows)] + [(out / f).read_text() for f in (
        "summary.json", "top.csv", "pareto_cost.csv", "pareto_energy.csv")]
    for text in texts:
        for token in re.split(r"[\s,:\[\]{}\"]+", text):
            assert token.lower() not in ("nan", "inf", "-inf", "infinity", "-infinity"), token
    assert "speed-up of the best configuration" in r.stdout


def test_cli_explain_prints_every_calibrated_input_of_one_point(tmp_path):
    spec = ROOT / "experiments" / "explore" / "small_2dc.toml"
    r = _cli(["explore", str(spec), "--explain", "--set", "network.transport=rc",
              "--set", "fabric.burst_hz=1.0", "--json"], tmp_path)
    assert r.returncode == 0, r.stderr
    for name in ("bandwidth efficiency eta", "per-message overhead", "efficiency over the DCI",
                 "load balance (ECMP law)", "microburst delay (burst law)",
                 "recovery from a link cut"):
        assert f"rc {name}" in r.stdout, name
    rows = json.loads(r.stdout[r.stdout.index("\n[") + 1:])
    assert {"name", "measured", "regime", "law", "full_scale", "extrapolated"} <= set(rows[0])
    law = next(x for x in rows if "ECMP law" in x["name"])
    assert "s x c" in law["law"] and "hashed flows per uplink" in law["full_scale"]
    assert not list(tmp_path.iterdir())  # searches and writes nothing


def test_cli_input_error_names_the_key(tmp_path):
    spec = tmp_path / "bad.toml"
    spec.write_text('name = "b"\n[placement]\ntp = [1, 0]\n')
    r = _cli(["explore", str(spec)], tmp_path)
    assert r.returncode == 2
    assert "placement.tp = 0" in r.stderr and "integer >= 1" in r.stderr


def test_explore_loads_neither_torch_nor_mininet_nor_pyroute2(tmp_path):
    code = (
        "import sys\n"
        "from commands.cli import main\n"
        f"rc = main(['explore', {str(ROOT / 'experiments/explore/small_2dc.toml')!r}, "
        f"'--out', {str(tmp_path / 'o')!r}, '--no-points', '--no-baselines'])\n"
        "heavy = sorted(m for m in ('torch', 'mininet', 'pyroute2') if m in sys.modules)\n"
        "print('HEAVY', heavy)\n"
        "sys.exit(rc)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                       text=True, timeout=600, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stderr
    assert "HEAVY []" in r.stdout
