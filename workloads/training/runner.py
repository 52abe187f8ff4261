"""Run a training experiment on a fabric, end to end: build it, run every variant, report.

    exp = experiment.load("experiments/training/digits_mrc_linkcut.toml")
    run_experiment(exp, Path("results/x"))

Its one job is the top of a run (:func:`run_experiment`): the experiment's fabric built
once (torn down by its context manager, also on Ctrl-C, which keeps what was recorded),
its healthy RTT measured for the meta records (:func:`measure_rtt`), every labelled
variant and repetition run on it, then the report, and last the refusal of runs whose
real compute overran their model (after the results and summaries are written). The
parts, each in a module of its own:

* workloads/training/variants.py: the labelled variants, the order of their repetitions
  (interleaved by default, so slow drifts of the machine spread over all variants);
* workloads/training/compute_model.py: the modelled compute, given or calibrated on the fabric;
* workloads/training/run.py: one repetition on the fabric (the failure timeline, gates
  at step boundaries, records streamed into the results, the progress line);
* workloads/training/rank_configs.py and workloads/training/worker_job.py: every rank's
configuration,
  and the worker processes with their records and gates;
* workloads/training/overruns.py: overruns of modelled compute, counted and refused;
* workloads/training/report.py: summaries, tables and plots of a finished run.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from emu.capture import capture_point
from emu.errors import require_root
from emu.fabric import Fabric
from workloads.experiment import Experiment
from workloads.training.overruns import refuse_overruns
from workloads.training.results import ResultsWriter
from workloads.training.variants import Variant, run_variants


def measure_rtt(fab: Fabric, a: str, b: str) -> float | None:
    """The healthy round-trip time between hosts ``a`` and ``b`` (median of 5 pings), s."""
    spec = fab.spec
    p = subprocess.run(fab.in_netns(a, "ping", "-6", "-n", "-c", "5", "-i", "0.05", "-q",
                                    str(spec.address(b))),
                       capture_output=True, text=True, timeout=30)
    # "rtt min/avg/max/mdev = 0.081/0.095/0.113/0.011 ms"
    for line in p.stdout.splitlines():
        if "min/avg/max" in line:
            return float(line.split("=")[1].split("/")[1]) / 1000
    return None


def run_experiment(exp: Experiment, out_dir: Path, say: Callable[[str], None] = print,
                   variants: list[tuple[str, dict]] | None = None,
                   interleave: bool | None = None,
                   captures: Sequence[str] = ()) -> list[dict]:
    """Build the experiment's fabric once and run every variant (label, overrides of
    ``with_overrides``; default: the experiment as it is, labelled by its transport) and
    repetition on it, then report. Returns the summaries. ``captures`` ("NODE:IFNAME",
    checked before anything is built): a pcap of each around every run
    (workloads/training/captures.py).

    ``interleave`` (default: when there are several variants and repetitions): rep 0
    of every variant, then rep 1, ... (else each variant's repetitions in a row). After
    the report, EmuError if a run overran its modelled compute (``refuse_overruns``).
    """
    from workloads.experiment import with_overrides
    from workloads.training.report import report  # matplotlib loads only to report

    require_root("emu run")
    runs = [(label, with_overrides(exp, ov) if ov else exp)
            for label, ov in (variants or [(exp.transport.name, {})])]
    if interleave is None:
        interleave = len(runs) > 1 and any(e.repetitions > 1 for _, e in runs)
    hosts = exp.hosts()
    points = [capture_point(exp.fabric_spec(), where) for where in captures]
    with ResultsWriter(out_dir, label=runs[0][0]) as writer:
        fab = Fabric(exp.fabric_spec(), name="run", progress=lambda m: say(f"  fabric: {m}"),
                     control_plane=exp.fabric.control_plane)
        try:
            fab.start()
        except Exception as e:
            # The results file says why it holds no runs (the exception still propagates).
            writer.error(rank=None, traceback=e, label="build")
            raise
        with fab:
            rtt = measure_rtt(fab, hosts[0], hosts[-1]) if len(hosts) > 1 else None
            outcomes = run_variants(fab, writer, [Variant(label, e) for label, e in runs],
                                    rtt, say, interleave, points)
    summaries = report(out_dir, exp, [label for label, _ in runs], say)
    refuse_overruns(outcomes)
    return summaries
