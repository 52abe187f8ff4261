"""``emu bench bursts`` on a short geometry: every burst meets a transport at the same
point of its step, the bursts bite at every port they hit, the steps they meet are
longer than healthy ones by a queue's worth, every message is placed byte-exact
(``run_alignment`` raises otherwise) and the summary is the runs'."""

import pytest

from commands.bench import bursts as bench_bursts
from commands.bench.bursts import BurstBench, alignments, run_alignment
from commands.bench.bursts import bench_bursts as bench
from transports.testing.fakenet import FakeNet

SHORT = BurstBench(bursts=2, warmup_steps=3, every_steps=3, alignments=3, repetitions=2,
                   sizes=(9_930, 40_000))


@pytest.mark.parametrize("kind", ["mrc", "rc"])
@pytest.mark.parametrize("size", SHORT.sizes)
def test_a_run_meets_bursts_that_drop_and_delay(kind, size):
    r = run_alignment(kind, size, 0.5, seed=1, bench=SHORT)
    assert len(r["burst_dropped"]) == (2 if kind == "mrc" else 1)  # MRC crosses both ports
    assert min(r["burst_dropped"]) > 0  # the bursts overflowed every port: not delay only
    assert r["burst_steps"] >= SHORT.bursts and r["healthy_s"] > 0
    # A step that meets a full port waits for at least half its queue to drain.
    assert r["worst_s"] > r["healthy_s"] + SHORT.drain_s / 2
    assert r["worst_s"] >= r["mean_s"] > r["healthy_s"]


@pytest.mark.parametrize("kind", ["mrc", "rc"])
@pytest.mark.parametrize("align", [0.0, 0.4, 0.9])
def test_every_burst_starts_at_the_alignment_of_its_step(monkeypatch, kind, align):
    # Bursts are armed as a step is about to begin: (its index, start - that instant).
    armed: list[tuple[int, float]] = []
    steps = 0
    real_burst, real_send = FakeNet.port_burst, FakeNet.post_send

    def port_burst(net, a, b, at, until, rate, **kw):
        armed.append((steps, at - net.now))
        return real_burst(net, a, b, at, until, rate, **kw)

    def post_send(net, name, msg, data):
        nonlocal steps
        if (msg - 1) % SHORT.messages_per_step == 0:  # a step's first message
            steps += 1
        return real_send(net, name, msg, data)

    monkeypatch.setattr(FakeNet, "port_burst", port_burst)
    monkeypatch.setattr(FakeNet, "post_send", post_send)
    r = run_alignment(kind, 9_930, align, seed=3, bench=SHORT)
    ports = 2 if kind == "mrc" else 1
    assert len(armed) == SHORT.bursts * ports  # both ports at one instant
    # every every_steps-th step after the warm-up, at the same point of that step
    assert sorted({i for i, _ in armed}) == [SHORT.warmup_steps + k * SHORT.every_steps
                                             for k in range(SHORT.bursts)]
    for _, since in armed:
        assert since == pytest.approx(align * r["cycle_s"])
    assert r["cycle_s"] == pytest.approx(r["healthy_s"] + SHORT.compute_s)


@pytest.mark.parametrize("kind", ["mrc", "rc"])
def test_a_step_posts_its_messages_as_a_ring_does(monkeypatch, kind):
    # The first ring_ranks messages of a step go at once; each later one waits for an
    # earlier one to arrive and the other ranks to pass it on (relay_s).
    posted: dict[int, float] = {}
    arrived: dict[int, float] = {}
    real_send, real_collect = FakeNet.post_send, FakeNet._collect

    def post_send(net, name, msg, data):
        posted[msg] = net.now
        return real_send(net, name, msg, data)

    def collect(net, name):
        before = len(net.done[name])
        real_collect(net, name)
        if name == "b":
            for c in net.done[name][before:]:
                arrived[c.msg] = c.t

    monkeypatch.setattr(FakeNet, "post_send", post_send)
    monkeypatch.setattr(FakeNet, "_collect", collect)
    run_alignment(kind, 9_930, 0.3, seed=2, bench=SHORT)
    n, depth = SHORT.messages_per_step, SHORT.ring_ranks
    relay = SHORT.relay_s(9_930)
    assert 0 < relay < 0.01  # three clean one-way trips of two frames
    for first in range(1, len(posted) + 1, n):  # each step
        step = range(first, first + n)
        assert all(posted[m] == posted[first] for m in step[:depth])
        # (MRC may complete them out of order: each arrival sends the ring's next one)
        later = sorted(posted[m] for m in step[depth:])
        assert later == pytest.approx(sorted(arrived[m] + relay for m in step[:n - depth]))


def test_alignments_cover_the_cycle_and_differ_by_repetition():
    for rep in range(3):
        points = alignments(SHORT, rep)
        assert len(points) == SHORT.alignments
        xs = [x for x, _ in points]
        assert all(0 <= x < 1 for x in xs) and xs == sorted(xs)
        gaps = [b - a for a, b in zip(xs, xs[1:], strict=False)]
        assert gaps == pytest.approx([1 / SHORT.alignments] * (len(xs) - 1))
    assert alignments(SHORT, 0) == alignments(SHORT, 0)  # the same for every transport
    assert alignments(SHORT, 0)[0][0] != alignments(SHORT, 1)[0][0]
    seeds = [s for rep in range(3) for _, s in alignments(SHORT, rep)]
    assert len(set(seeds)) == len(seeds)


def test_the_summary_is_the_runs():
    said: list[str] = []
    out = bench(say=said.append, bench=SHORT)
    assert [s["size"] for s in out["sizes"]] == list(SHORT.sizes)
    for s in out["sizes"]:
        assert s["bursts_dropped"] is True
        runs = {k: [[run_alignment(k, s["size"], x, seed, SHORT)
                     for x, seed in alignments(SHORT, rep)]
                    for rep in range(SHORT.repetitions)] for k in ("mrc", "rc")}
        worst = {k: [max(r["worst_s"] for r in rep) for rep in runs[k]] for k in runs}
        ratios = sorted(m / r for m, r in zip(worst["mrc"], worst["rc"], strict=True))
        assert s["worst_ratio"]["min"] == pytest.approx(ratios[0])
        assert s["worst_ratio"]["max"] == pytest.approx(ratios[-1])
        assert s["mrc_worst_not_longer"] == sum(x <= 1.0 for x in ratios)
        assert s["mrc"]["worst_s"]["max"] == pytest.approx(max(worst["mrc"]))
        paired = [m["worst_s"] / r["worst_s"]
                  for rm, rr in zip(runs["mrc"], runs["rc"], strict=True)
                  for m, r in zip(rm, rr, strict=True)]
        assert s["paired_ratio"]["min"] == pytest.approx(min(paired))
        assert s["paired_ratio"]["max"] == pytest.approx(max(paired))
        assert s["paired_not_longer"] == sum(x <= 1.0 for x in paired)
    assert len(said) == 1 + len(SHORT.sizes)
    assert "every run" in said[1]


def test_bad_geometry_alignment_and_transport_are_named():
    with pytest.raises(ValueError, match="on_s=0"):
        BurstBench(on_s=0)
    with pytest.raises(ValueError, match="every_steps"):
        BurstBench(every_steps=0)
    with pytest.raises(ValueError, match="ring_ranks"):
        BurstBench(ring_ranks=0)
    with pytest.raises(ValueError, match="align=1.0"):
        run_alignment("mrc", 1000, 1.0, 1, SHORT)
    with pytest.raises(ValueError, match="'tcp'"):
        run_alignment("tcp", 1000, 0.0, 1, SHORT)
    assert bench_bursts.TRANSPORTS == ("mrc", "rc")
