"""Predicting an emulator experiment at the emulator's own scale (``emu explore --predict``).

The full-scale model's pieces (ring and hierarchical all-reduce, the pipeline closed
forms) applied to an experiment file's own fabric, model and compute, with the
calibration's dimensionless figures turned back into emulator time through the RTT of
the experiment's links (the calibration's RTT with its frame serialisation moved to the
experiment's line rate, ``regime_rtt``). This is how the model is validated against the emulator:
predict the healthy step of a run from the calibration of a *different* run, and
compare with what the run measured (tests/unit/test_explorer_emulator.py).

What it covers: data-parallel training (ring or hierarchical all-reduce of float32
gradients over MRC; the tiny LM's size needs its corpus, hence torch) and GPipe
pipelines of the tiny LM, with ``compute = "modelled"``
and an explicit ``compute_ms`` (a prediction may not read the run's own measurements);
a leaf-spine cut in the timeline adds the predicted median and mean step during the cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from explorer.calibration import Calibration, TransportCal
from explorer.model_terms import ONE_WAY_RTTS
from explorer.netcost import allreduce, hierarchical_allreduce
from explorer.pipeline import pipeline_time
from explorer.spec import SpecError

__all__ = ["MODEL_FACTS", "predict", "predict_experiment"]

# Sizes of workloads/models.py's models (tests/unit/explorer/test_explorer_validation.py
# checks
# them against the torch modules): parameters, as a function of the vocabulary for the
# tiny LM (embeddings 64 V + 64 x 64 positions, two layers of 49,984, head 65 V + 128),
# and the activation per sample that crosses a pipeline stage boundary (tiny_lm: context
# x d_model float32; digits_cnn's boundaries differ in size).
MODEL_FACTS: dict[str, dict[str, Any]] = {
    "digits_cnn": {"params": lambda vocab: 9930, "boundary_floats": None},
    "tiny_lm": {"params": lambda vocab: 129 * vocab + 104192, "boundary_floats": 64 * 64},
}
FLOAT_BYTES = 4
# Headers beside a payload on the emulated wire: Ethernet 14, IPv6 40, UDP 8, our 48,
# and an SRH with two segments (8 + 2 x 16).
WIRE_HEADERS = 14 + 40 + 8 + 48 + 40
MTU_PAYLOAD = 8000  # workloads/collectives/transportcomm.py's default datagram payload


def _transport(cal: Calibration, name: str) -> TransportCal:
    tc = cal.get({"dblp": "mrc", "gloo": "tcp"}.get(name, name))
    if tc.rtt_s is None:
        raise SpecError(f"calibration of {tc.transport!r} ({tc.source}) has no regime RTT: "
                        "predictions at the emulator's scale need a version-2 record")
    return tc


def _vocab(model: str) -> int:
    """The tiny LM's vocabulary: the characters of the installed scikit-learn's dataset
    descriptions (workloads/data.py, which needs torch; only asked for that model)."""
    if model != "tiny_lm":
        return 0
    from workloads.data import load_char_corpus

    return load_char_corpus(context=64).vocab_size


def regime_rtt(tc: TransportCal, rate_mbit: float) -> float:
    """The calibration's RTT moved to links of ``rate_mbit``: its RTT is the transport's
    own round trip plus one frame's serialisation at the calibration's line rate
    (workloads/calibration/record.py), so the serialisation is swapped for this rate's."""
    assert tc.rtt_s is not None
    frame = ((tc.payload_bytes or MTU_PAYLOAD) + WIRE_HEADERS) * 8
    if tc.line_rate_mbit is None:
        return tc.rtt_s
    base = max(0.0, tc.rtt_s - frame / (tc.line_rate_mbit * 1e6))
    return base + frame / (rate_mbit * 1e6)


def predict(exp: Any, cal: Calibration) -> dict[str, Any]:
    """Predict ``exp`` (a workloads.experiment.Experiment); see the module docstring."""
    w, f, tr = exp.workload, exp.fabric, exp.transport
    if w.compute != "modelled" or not w.compute_ms:
        raise SpecError(f"{exp.source}: a prediction needs workload.compute = \"modelled\" "
                        "and workload.compute_ms (it may not read the run's measurements)")
    tc = _transport(cal, tr.name)
    rtt = regime_rtt(tc, f.rate_mbit)
    frame = ((tc.payload_bytes or MTU_PAYLOAD) + WIRE_HEADERS) * 8 / (f.rate_mbit * 1e6)
    overhead = (ONE_WAY_RTTS * rtt + tc.overhead_frames.value * frame
                if tc.overhead_frames is not None
                else max(tc.overhead_rtts.value, ONE_WAY_RTTS) * rtt)
    payload = MTU_PAYLOAD / (MTU_PAYLOAD + WIRE_HEADERS)
    lanes = f.planes if tr.name != "gloo" else 1
    bw_in = tc.eta.value * lanes * f.rate_mbit * 1e6 / 8 * payload
    eta_x = (tc.eta_dci or tc.eta).value
    bw_x = eta_x * lanes * f.dci_rate_mbit * 1e6 / 8 * payload
    lat_x = f.dci_delay_ms * 1e-3
    dcs = f.dcs
    compute = w.compute_ms / 1000
    out: dict[str, Any] = {"experiment": exp.name, "kind": w.kind, "transport": tr.name,
                           "rtt_s": rtt, "compute_s": compute}
    facts = MODEL_FACTS[w.model]
    if w.kind == "pipeline":
        if facts["boundary_floats"] is None:
            raise SpecError(f"{exp.source}: pipelines of {w.model!r} are not predicted "
                            "(their stage boundaries differ in size)")
        p, m = w.workers, w.microbatches or 1
        act = w.batch_size / m * facts["boundary_floats"] * FLOAT_BYTES
        g = min(dcs, p)
        step = pipeline_time("gpipe", p, m, 1, 0, compute / 3, 2 * compute / 3,
                             overhead, act / bw_in, lat_x + overhead,
                             act / min(bw_in, bw_x), g)
        out.update(healthy_step_s=step, comm_s=step - m * compute,
                   activation_bytes=act, microbatches=m)
        return out
    size = facts["params"](_vocab(w.model)) * FLOAT_BYTES
    n = w.workers
    k = min(dcs, n)
    n_in = n // k
    coll = tr.collective or "ring"
    if coll == "hierarchical" and k > 1:
        # Every rank of a DC sends its share across the DCI at once.
        comm = hierarchical_allreduce(size, n_in, k, bw_in, min(bw_in, bw_x / n_in), 0.0,
                                      lat_x, overhead)
    elif coll == "ring":
        ring_lat = k * lat_x if k > 1 else 0.0
        comm = allreduce(size, n, min(bw_in, bw_x) if k > 1 else bw_in, ring_lat, overhead)
    else:
        raise SpecError(f"{exp.source}: collective {coll!r} is not predicted (ring, "
                        "hierarchical)")
    step = compute + comm
    out.update(healthy_step_s=step, comm_s=comm, gradient_bytes=size, collective=coll)
    cut = _cut(exp, tc, rtt, step, comm)
    if cut:
        out.update(cut)
    return out


def declared_events(exp: Any) -> tuple[Any, ...]:
    """The experiment's timeline as declared: a prediction never runs timeline code (a
    script that is more than declarations is refused, naming it)."""
    if exp.declared_events is not None:
        return tuple(exp.declared_events)
    raise SpecError(f"{exp.source}: its timeline {exp.timeline_file} is a script that only "
                    "running it can read, and --predict never runs timeline code: declare "
                    "its events (name = fail_link(...); timeline = [at(...), ...]) or use a "
                    ".toml timeline")


def _cut(exp: Any, tc: TransportCal, rtt: float, step: float, comm: float) -> dict | None:
    """A leaf-spine cut: MRC loses its recovery once and, while the cut lasts, whatever the
    leaf's remaining uplinks cannot carry of its hosts' traffic."""
    events = declared_events(exp)
    cuts = [ev for ev in events if type(ev.action).__name__ == "LinkDown"]
    if not cuts:
        return None
    f = exp.fabric
    hosts = min(f.hosts_per_leaf, exp.workload.workers)
    # MRC spreads a host's traffic over every plane and spine: after the cut, the cut
    # plane gives each host of the leaf at most (spines - 1) x fabric rate / hosts.
    cut_plane = min(f.rate_mbit, (f.spines - 1) * f.fabric_rate_mbit / hosts)
    slow = f.planes * f.rate_mbit / ((f.planes - 1) * f.rate_mbit + cut_plane)
    median = (step - comm + comm * slow) / step
    # How long the cut lasts, in seconds or in steps (events scheduled by step).
    restore = [ev for ev in events if type(ev.action).__name__ == "Restore"]
    window = None
    if restore and cuts[0].at is not None and restore[0].at is not None:
        window = min(ev.at for ev in restore) - cuts[0].at
    elif restore and cuts[0].step is not None and restore[0].step is not None:
        window = (min(ev.step for ev in restore) - cuts[0].step) * step * median
    recovery = (tc.recovery_rtts.value if tc.recovery_rtts else 0.0) * rtt
    mean = None
    if window:
        steps = max(1.0, window / (step * median))
        mean = median + recovery / steps / step
    return {"cut_over_healthy_median": median, "cut_over_healthy_mean": mean,
            "recovery_s": recovery}


def predict_experiment(path: str | Path, cal: Calibration,
                       overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Load an experiment file (with ``KEY=VALUE`` overrides) and predict it."""
    from workloads import experiment  # loads the emulator's timeline vocabulary too

    exp = experiment.load(path)
    if overrides:
        exp = experiment.with_overrides(exp, dict(experiment.parse_override(o)
                                                  for o in overrides))
    return predict(exp, cal)
