"""The calibration record version 2 as a file: its schema, validation, reading and JSON form.

Its one job: say what a v2 record must hold and check it, strictly (unknown or missing
keys are errors, every interval's value lies between its ``lo`` and ``hi``), so that a
record written by ``emu calibrate`` and read by the explorer mean the same thing. What
each field means and how it is measured is the docstring of ``workloads.calibration.record``;
the names here (``FORMAT``, ``TRANSPORTS``, ``BINDINGS``, ``CalibrationError``) are the
vocabulary every part of the calibration shares.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

FORMAT = "scaleacross-emu/calibration/2"
TRANSPORTS = ("mrc", "rc", "tcp", "dblp")
BINDINGS = ("host_nic", "dci")


class CalibrationError(ValueError):
    """Calibration input or record that cannot be used (the message names it)."""


def plain(obj: Any) -> Any:
    """JSON data: tuples to lists, numpy scalars to numbers, non-finite floats to None."""
    if isinstance(obj, Mapping):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [plain(v) for v in obj]
    if hasattr(obj, "item"):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


# -- validation --------------------------------------------------------------------------

_CI = {"value": "float?", "lo": "float?", "hi": "float?"}
_INTERVALS = (("value", "lo", "hi"), ("recovery_rtts", "lo", "hi"),
              ("overhead_rtts", "overhead_rtts_lo", "overhead_rtts_hi"))
_POINT = {"message_bytes": "int", "message_bdp": "float", "seconds": ["float"],
          "cpu_cores": "float", "excluded": "str?"}
_ETA = {"value": "float?", "lo": "float?", "hi": "float?", "overhead_rtts": "float?",
        "overhead_rtts_lo": "float?", "overhead_rtts_hi": "float?", "binding_mbit": "float",
        "points": [_POINT]}
_REGIME = {"rtt_s": "float", "payload_bytes": "int", "bdp_bytes": "float",
           "buffer_packets": "int", "buffer_bdp": "float", "message_bdp": "range?",
           "flows_per_uplink": "range?", "burst_rtts": "range?",
           "burst_excess_buffers": "range?", "cpu_cores_max": "float?", "binding": "binding",
           "rto_floor_s": "float?"}
_TRANSPORT = {
    "regime": _REGIME, "eta": _ETA, "eta_dci": ("null", _ETA),
    "load_balance": [{"flows_per_uplink": "float", "qps_per_connection": "int", **_CI,
                      "balls_into_bins": "float?", "ecmp_flows": "int?",
                      "ecmp_uplinks": "int?", "excluded": "str?"}],
    "tail_inflation": [{"burst_rtts": "float", "burst_excess_buffers": "float", **_CI,
                        "burst_drops": "int", "delay_spike_only": "bool", "rounds": "int",
                        "healthy_p50_rtts": "float?"}],
    "recovery": {"link_cut": {"lost_rtts": "float?", "convergence_s": "float?",
                              "timer_wait_s": "float?",
                              "recovery_rtts": "float?", "lo": "float?", "hi": "float?",
                              "recovery_rtos": "float?"}},
    "dblp": ("null", {"tolerance": "float?", "delivered_fraction": _CI,
                      "steps_ratio": ("null", _CI), "steps_ratio_reason": "str?"}),
    "excluded": ["str"],
    # what the switch ports did over the transport's measurements (its calibrated form's
    # switches, workloads/systems.py); a key ending in "?" may be absent (older records)
    "switches?": {"signals": "str", "mechanism": "str", "packets": "int", "marked": "int",
                  "trimmed": "int", "dropped": "int", "ce_seen": "int",
                  "marked_fraction": "float?", "trimmed_fraction": "float?",
                  "dropped_fraction": "float?"}}
# Keys added to version 2 after its first records: a record written before them is still
# a valid v2 record without them (readers treat them as absent).
ADDED = frozenset({"qps_per_connection", "ecmp_flows", "ecmp_uplinks", "healthy_p50_rtts",
                   "timer_wait_s"})
_FABRIC = {"planes": "int", "spines": "int", "leaves": "int", "hosts_per_leaf": "int",
           "rate_mbit": "float", "fabric_rate_mbit": "float", "queue_packets": "int",
           "mtu": "int", "nominal_gbit": "float", "dci": "dict?"}
_RECORD = {"format": "str", "generated": "float", "command": "str", "versions": "dict",
           "host": "dict", "fabric": _FABRIC, "transports": "transports"}


def _check(v: Any, schema: Any, where: str) -> None:
    def bad(want: str) -> CalibrationError:
        return CalibrationError(f"{where}={v!r} is invalid: must be {want}")

    if isinstance(schema, tuple):  # ("null", schema)
        if v is not None:
            _check(v, schema[1], where)
        return
    if isinstance(schema, list):
        if not isinstance(v, list):
            raise bad("a list")
        for i, item in enumerate(v):
            _check(item, schema[0], f"{where}[{i}]")
        return
    if isinstance(schema, dict):
        if not isinstance(v, dict):
            raise bad("an object")
        keys = {k.removesuffix("?") for k in schema}
        missing = {k for k in schema if not k.endswith("?")} - set(v) - ADDED
        if set(v) - keys or missing:
            raise CalibrationError(f"{where}: unknown keys {sorted(set(v) - keys)}, "
                                   f"missing keys {sorted(missing)}")
        for k, s in schema.items():
            if k.removesuffix("?") in v:
                _check(v[k.removesuffix("?")], s, f"{where}.{k.removesuffix('?')}")
        for mid, lo, hi in _INTERVALS:
            trio = [v.get(k) for k in (lo, mid, hi)]
            a, m, b = trio
            if mid in v and a is not None and m is not None and b is not None \
                    and not a <= m <= b:
                raise CalibrationError(f"{where}: {mid}={trio[1]} is outside [{lo}, {hi}] = "
                                       f"[{trio[0]}, {trio[2]}]")
        return
    if schema.endswith("?"):
        if v is None:
            return
        schema = schema[:-1]
    number = isinstance(v, int | float) and not isinstance(v, bool)
    if schema == "float" and not (number and math.isfinite(v)):
        raise bad("a finite number")
    if schema == "int" and not (isinstance(v, int) and not isinstance(v, bool)):
        raise bad("an integer")
    if schema in ("str", "bool", "dict") and not isinstance(v, {"str": str, "bool": bool,
                                                                 "dict": dict}[schema]):
        raise bad(f"a {schema}")
    if schema == "binding" and v not in BINDINGS:
        raise bad(f"one of {', '.join(BINDINGS)}")
    if schema == "range" and not (isinstance(v, list) and len(v) == 2 and all(
            isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
            for x in v) and v[0] <= v[1]):
        raise bad("[lo, hi] with finite lo <= hi")
    if schema == "transports":
        if not isinstance(v, dict) or not v or set(v) - set(TRANSPORTS):
            raise bad(f"an object with keys among {', '.join(TRANSPORTS)}")
        for name, t in v.items():
            _check(t, _TRANSPORT, f"{where}.{name}")
            if (name == "dblp") != (t["dblp"] is not None):
                raise CalibrationError(f"{where}.{name}.dblp must be set for dblp only")


def validate(record: Any) -> None:
    """CalibrationError naming the first field of ``record`` that is not a v2 record's."""
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        got = record.get("format") if isinstance(record, dict) else type(record).__name__
        raise CalibrationError(f"format={got!r} is invalid: must be {FORMAT!r}")
    _check(record, _RECORD, "record")


def load(path: str | Path) -> dict:
    """A v2 record read from ``path`` and validated."""
    try:
        record = json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise CalibrationError(f"{path}: not JSON: {e}") from None
    try:
        validate(record)
    except CalibrationError as e:
        raise CalibrationError(f"{path}: {e}") from None
    return record
