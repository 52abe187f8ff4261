"""A space's points as columns: one float64 array (or a scalar) per spec field.

The cost model (explorer/model.py) reads configurations this way: field
``section.name`` is ``cols["section.name"]``; a choice is its index in the field's
choices (spec.PIPELINES, ...), a boolean 0.0 / 1.0, an unset optional field NaN, and the
DCs' sizes are ``cols["cluster.n0"] ... cols["cluster.n{D-1}"]`` (0 for DCs not used).
A field that is the same at every point is a Python float, broadcast by numpy.

``Encoder(space).columns(axis_indices)`` turns, for a chunk of points, each axis' index
arrays into those columns, resolving presets per point (a preset axis decides every
field of its section that the file does not give). The index arrays may have any shapes
that broadcast: the search gives each axis a dimension of its own, so that every column
keeps only the dimensions of the axes it depends on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from explorer.presets import preset as preset_values
from explorer.spec import SECTIONS, Config, field_check, section_fields
from explorer.specfile import Space

__all__ = ["Encoder", "config_columns", "encode"]


def encode(key: str, value: Any) -> float:
    """A field's value as a float (see the module docstring)."""
    check = _CHECKS.get(key)
    if check is None:
        section, _, name = key.partition(".")
        check = _CHECKS[key] = field_check(section_fields(section)[name])
    if value is None:
        return float("nan")
    if check.kind == "choice":
        return float(check.choices.index(value))
    if check.kind == "bool":
        return 1.0 if value else 0.0
    return float(value)


def _numeric_fields() -> list[str]:
    out = []
    for section in SECTIONS:
        for name, f in section_fields(section).items():
            if field_check(f).kind not in ("str", "ints"):
                out.append(f"{section}.{name}")
    return out


NUMERIC_FIELDS = _numeric_fields()
_CHECKS: dict[str, Any] = {}  # key -> its Check (encode's lookups, filled on first use)
_SPLIT = {k: tuple(k.split(".", 1)) for k in NUMERIC_FIELDS}


def _default(key: str) -> Any:
    section, _, name = key.partition(".")
    return section_fields(section)[name].default


class Encoder:
    """Columns of a :class:`Space` for chunks of points given by axis indices."""

    def __init__(self, space: Space) -> None:
        self.space = space
        self.axis_pos = {a.key: i for i, a in enumerate(space.axes)}
        self.max_dcs = self._max_dcs()

    def _max_dcs(self) -> int:
        ax = self.space.axis("cluster.dcs")
        return max(ax.values) if ax else int(self.space.fixed.get("cluster.dcs",
                                                                  _default("cluster.dcs")))

    def _section_preset(self, section: str) -> tuple[int | None, list[dict[str, Any]]]:
        """(axis position of the section's preset or None, preset values per axis value)."""
        key = f"{section}.preset"
        if key in self.axis_pos:
            ax = self.space.axes[self.axis_pos[key]]
            return self.axis_pos[key], [preset_values(section, v) for v in ax.values]
        name = self.space.fixed.get(key)
        return None, [preset_values(section, name)] if name else [{}]

    def columns(self, idx: Sequence[np.ndarray]) -> dict[str, Any]:
        """Columns for the points whose axis indices are ``idx`` (one array per axis)."""
        cols: dict[str, Any] = {}
        presets = {s: self._section_preset(s) for s in ("model", "gpu")}
        for key in NUMERIC_FIELDS:
            section, _, name = key.partition(".")
            if key in self.axis_pos:
                pos = self.axis_pos[key]
                table = np.array([encode(key, v) for v in self.space.axes[pos].values])
                cols[key] = table[idx[pos]]
            elif key in self.space.fixed:
                cols[key] = encode(key, self.space.fixed[key])
            elif section in presets:
                preset_pos, tables = presets[section]
                vals = [encode(key, t.get(name, _default(key))) for t in tables]
                if preset_pos is None or len(set(map(repr, vals))) == 1:
                    cols[key] = vals[0]
                else:
                    cols[key] = np.array(vals)[idx[preset_pos]]
            else:
                cols[key] = encode(key, _default(key))
        self._model_either(cols)
        self._dcs(cols, idx)
        return cols

    def _model_either(self, cols: dict[str, Any]) -> None:
        # A file that gives one of the two batch keys overrides the preset's other one.
        for key, other in (("model.global_batch_seqs", "model.global_batch_tokens"),
                           ("model.global_batch_tokens", "model.global_batch_seqs")):
            given = key in self.space.fixed or key in self.axis_pos
            if given and other not in self.space.fixed and other not in self.axis_pos:
                cols[other] = float("nan")

    def _dcs(self, cols: dict[str, Any], idx: Sequence[np.ndarray]) -> None:
        dcs = cols["cluster.dcs"]
        key = "cluster.dc_gpus"
        for i in range(self.max_dcs):
            if key in self.axis_pos:
                pos = self.axis_pos[key]
                table = np.array([(v[i] if i < len(v) else 0) for v in
                                  self.space.axes[pos].values], dtype=float)
                base: Any = table[idx[pos]]
            elif self.space.fixed.get(key) is not None:
                layout = self.space.fixed[key]
                base = float(layout[i]) if i < len(layout) else 0.0
            else:
                base = cols["cluster.gpus_per_dc"]
            cols[f"cluster.n{i}"] = np.where(i < np.asarray(dcs), base, 0.0)
        cols["cluster.max_dcs"] = self.max_dcs


def config_columns(configs: Sequence[Config], scalar: bool = False) -> dict[str, Any]:
    """Columns of explicit configurations (one array entry each; ``scalar``: the one
    configuration's values as plain floats)."""
    cols: dict[str, Any] = {}
    flat = [{k: getattr(getattr(c, s), n) for k, (s, n) in _SPLIT.items()} for c in configs]
    if scalar and len(configs) != 1:
        raise ValueError(f"scalar=True needs exactly one configuration, got {len(configs)}")
    for key in NUMERIC_FIELDS:
        vals = [encode(key, f[key]) for f in flat]
        cols[key] = vals[0] if scalar else np.array(vals)
    max_dcs = max(c.cluster.dcs for c in configs)
    for i in range(max_dcs):
        vals = [float(c.cluster.gpus[i]) if i < c.cluster.dcs else 0.0 for c in configs]
        cols[f"cluster.n{i}"] = vals[0] if scalar else np.array(vals)
    cols["cluster.max_dcs"] = max_dcs
    return cols
