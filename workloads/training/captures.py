"""Packet captures around each training run (`emu run --capture NODE:IFNAME`).

One pcap per run and capture point, ``captures/LABEL-repN-NODE-IFNAME.pcap`` in the
results directory (tcpdump in the node's namespace, the transports' UDP port only, SRH
or not; emu/capture.py), started before the run's workers and stopped after them. Each
gets a ``capture`` record in results.jsonl: where it is, tcpdump's counters (a capture
that dropped packets is incomplete, and says so) and ``realtime_minus_monotonic_s``:
pcap timestamps are on the wall clock, step records (``t_enter``, ``t_exit``) on
CLOCK_MONOTONIC, so ``pcap time - that = monotonic time``.

tcpdump costs CPU on the shared cores: a captured run may overrun its compute model.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

from emu import safefs
from emu.capture import Capture
from emu.fabric import Fabric
from workloads.training.results import ResultsWriter

CAPTURE_DIR = "captures"


def capture_path(out_dir: Path, label: str, rep: int, node: str, ifname: str) -> Path:
    """Where the pcap of ``node:ifname`` during repetition ``rep`` of ``label`` goes (a
    label's "/" and other characters a file name should not hold become "-")."""
    safe = re.sub(r"[^A-Za-z0-9_.]+", "-", label).strip("-") or "run"
    return out_dir / CAPTURE_DIR / f"{safe}-rep{rep}-{node}-{ifname}.pcap"


class RunCaptures:
    """The captures of one run, as a context manager: started on entry (all or none),
    stopped on exit, each then recorded (``capture`` record) and reported to ``say``."""

    def __init__(self, fab: Fabric, writer: ResultsWriter, points: Sequence[tuple[str, str]],
                 label: str, rep: int, say: Callable[[str], None] = print) -> None:
        self.fab, self.writer, self.points = fab, writer, tuple(points)
        self.label, self.rep, self.say = label, rep, say
        self.captures: list[Capture] = []
        self.offset_s = 0.0

    def __enter__(self) -> RunCaptures:
        try:
            for node, ifname in self.points:
                path = capture_path(self.writer.out_dir, self.label, self.rep, node, ifname)
                safefs.mkdir_private(path.parent)
                cap = Capture(self.fab, node, ifname, path, exclusive=True)
                cap.start()
                self.captures.append(cap)
        except BaseException:
            self._stop_all()
            raise
        self.offset_s = time.time() - time.monotonic()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        stopped = self._stop_all()
        if exc_type is not None:
            return
        for cap, err in stopped:
            st = cap.stats
            rec = {"label": self.label, "rep": self.rep, "node": cap.node,
                   "ifname": cap.ifname,
                   "path": str(cap.path.relative_to(self.writer.out_dir)),
                   "captured": st.captured if st else None,
                   "dropped": st.dropped if st else None,
                   "realtime_minus_monotonic_s": round(self.offset_s, 6), "error": err}
            self.writer.write("capture", **rec)
            lost = (f", {st.dropped} dropped by the kernel: incomplete"
                    if st and st.dropped else "")
            self.say(f"  captured {cap.node}:{cap.ifname}: "
                     f"{st.captured if st else '?'} packets{lost} -> {cap.path}"
                     + (f" ({err})" if err else ""))

    def _stop_all(self) -> list[tuple[Capture, str | None]]:
        out: list[tuple[Capture, str | None]] = []
        for cap in self.captures:
            try:
                cap.stop()
                out.append((cap, None))
            except Exception as e:  # noqa: BLE001 - one capture's failure is its record's
                out.append((cap, str(e)))
        self.captures = []
        return out
