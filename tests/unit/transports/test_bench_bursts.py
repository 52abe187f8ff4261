"""``emu bench bursts`` on a short geometry: the bursts bite at every port they hit, the
steps they meet are longer than healthy ones by a queue's worth, every message is
placed byte-exact (``run_phase`` raises otherwise) and the summary is the runs'."""

import pytest

from transports.bench_bursts import BurstBench, bench_bursts, phases, run_phase

SHORT = BurstBench(bursts=3, steps=14, first_burst_s=0.2, phase_span_s=0.1, phases=2,
                   sizes=(9_930, 40_000))
FULL_QUEUE_S = SHORT.queue_frames * SHORT.frame_bytes / SHORT.port_rate  # 65 ms


@pytest.mark.parametrize("kind", ["mrc", "rc"])
@pytest.mark.parametrize("size", SHORT.sizes)
def test_a_run_meets_bursts_that_drop_and_delay(kind, size):
    r = run_phase(kind, size, 0.5, seed=1, bench=SHORT)
    assert len(r["burst_dropped"]) == (2 if kind == "mrc" else 1)  # MRC crosses both ports
    assert min(r["burst_dropped"]) > 0  # the bursts overflowed every port: not delay only
    assert r["burst_steps"] >= 3 and r["healthy_s"] is not None
    # A step that meets a full port waits for at least half its queue to drain.
    assert r["worst_s"] > r["healthy_s"] + FULL_QUEUE_S / 2
    assert r["worst_s"] >= r["mean_s"] > r["healthy_s"]


def test_the_summary_is_the_runs():
    said = []
    out = bench_bursts(say=said.append, bench=SHORT)
    assert [s["size"] for s in out["sizes"]] == list(SHORT.sizes)
    for s in out["sizes"]:
        assert s["bursts_dropped"] is True
        runs = {k: [run_phase(k, s["size"], ph, i + 1, SHORT) for i, ph in
                    enumerate(phases(SHORT.phases))] for k in ("mrc", "rc")}
        ratios = sorted(m["worst_s"] / r["worst_s"] for m, r in zip(runs["mrc"], runs["rc"],
                                                                      strict=True))
        assert s["worst_ratio"]["min"] == pytest.approx(ratios[0])
        assert s["worst_ratio"]["max"] == pytest.approx(ratios[-1])
        assert s["mrc_worst_not_longer"] == sum(x <= 1.0 for x in ratios)
        assert s["mrc"]["worst_s"]["max"] == pytest.approx(max(r["worst_s"] for r in runs["mrc"]))
    assert len(said) == 1 + len(SHORT.sizes)
    assert "every run" in said[1]


def test_bad_geometry_and_transport_are_named():
    with pytest.raises(ValueError, match="on_s=0.3"):
        BurstBench(on_s=0.3, every_s=0.2)
    with pytest.raises(ValueError, match="'tcp'"):
        run_phase("tcp", 1000, 0.0, 1, SHORT)
