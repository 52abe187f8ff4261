"""Measure what the explorer's transfer laws leave free (root; about 9 minutes on 2 cores).

    sudo .venv/bin/python scripts/calibrate_laws.py [OUT_DIR] [deep]   # default explorer/data
                                                  # (deep: the second record only)

Two calibration records (workloads/calibration/calibrate.py's phases, the shipped plan's settings):

* ``calibration_ecmp.json``: on the default calibration fabric (2 planes x 4 spines x 2
  racks x 4 hosts, 10 Mbit/s, 16-packet FIFOs), load balance at 1, 2 and 4 flows per
  host for MRC, RC (with 1 and 4 queue pairs per plane: 1 to 16 hashed flows per uplink)
  and TCP, and the tails through microbursts (with the healthy P50 the tail law needs).
  The explorer reads it over ``calibration_default.json``, figure by figure.
* ``calibration_rc_lossless.json``: RC alone on the same fabric with 1024-packet FIFOs,
  deeper than every RC window that can meet at one port in these measurements (64
  packets x 16 QPs): nothing drops, so a collision or a burst costs queueing only, as in
  a PFC-lossless RoCE fabric (deep FIFOs stand in for PFC: no pause propagates
  upstream), and RC's retransmission timer is set above the deepest queue, as RoCE's
  (1.07 s, some 1e5 RTTs) is. eta, load balance (1 and 4 QPs) and tails. The
  explorer's ``rc`` (production RoCE) reads it; the 16-packet record's RC is
  ``rc_lossy``.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from topologies import LinkSpec
from workloads.calibration.calibrate import Calibration
from workloads.calibration.plan import FABRIC, FULL

DEEP_FIFO = 1024


def main(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    ecmp = replace(FULL, transports=("mrc", "rc", "tcp"), measure=("load", "tails"))
    if "deep" not in sys.argv[2:]:
        Calibration(out_dir / "calibration_ecmp.json", ecmp, dci_spec=None, name="lawecmp",
                    command="scripts/calibrate_laws.py (load, tails; mrc, rc x 1 and 4 QPs, "
                    "tcp)").run()
    deep = replace(FABRIC, host_link=LinkSpec(FABRIC.host_link.rate_mbit, DEEP_FIFO),
                   fabric_link=LinkSpec(FABRIC.fabric_link.rate_mbit, DEEP_FIFO))
    # RoCE's timeout (4.096 us x 2^18 = 1.07 s) is about 1e5 full-scale RTTs: on a fabric
    # that never drops it never fires. RC's emulated timer floor is a few RTTs, which the
    # seconds of queueing a 1024-packet FIFO holds at 10 Mbit/s would fire spuriously
    # (and go back N into the queue): its floor is raised above the deepest queue.
    lossless = replace(FULL, transports=("rc",), measure=("eta", "load", "tails"),
                       rc_config=(("rto_min", 10.0), ("rto_init", 10.0), ("rto_max", 20.0),
                                  ("give_up_s", 60.0)))
    Calibration(out_dir / "calibration_rc_lossless.json", lossless, spec=deep, dci_spec=None,
                name="lawdeep", command=f"scripts/calibrate_laws.py (rc on {DEEP_FIFO}-packet "
                "FIFOs: eta, load x 1 and 4 QPs, tails)").run()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("explorer/data"))
