"""What ECMP's random hashing should cost a traffic pattern on a multi-plane Clos.

Two expectations, both of the fraction of the ideal (every link of the pattern equally
loaded, as perfect spraying would) that a pattern's aggregate goodput reaches when each
connection is hashed onto one spine:

* ``occupancy``: the balls-into-bins figure of `workloads.calibration.stats.
  balls_into_bins`: F connections of a leaf's ECMP group onto its N uplinks,
  E[occupied uplinks] / N (for F = N: 1 - (1 - 1/N)^N), times the share of a host's
  NICs those connections can use. It counts busy uplinks, as if each were full while
  any other was (utilisation, an upper bound).
* ``completion``: the pattern's goodput is all bytes over the *last* completion, and the
  last connection ends when the most loaded link drains; a seeded Monte Carlo of the
  hashing over every link the pattern crosses (host NICs, leaf uplinks, spine
  downlinks, destination NICs) gives E[ideal time / bottleneck time]. Also an upper
  bound: it assumes fair sharing and no loss.

A transport with one connection per plane (RC: a QP per NIC, half the bytes each) has
each hashed onto one of its plane's spines; one with a single connection per pair (kernel
TCP) has it hashed onto one (plane, spine) of all of them. Which is which is the
transport's capability (transports/registry.py ``per_plane``), not its name; a
transport that sprays (``multipath``) is not hashed at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from transports import registry
from workloads.calibration.stats import balls_into_bins

PATTERNS = ("permutation", "all_to_all")


@dataclass(frozen=True)
class Clos:
    """The shape that matters here: planes x spines, leaves x hosts per leaf."""

    planes: int
    spines: int
    leaves: int
    hosts_per_leaf: int

    @property
    def hosts(self) -> int:
        return self.leaves * self.hosts_per_leaf

    def leaf(self, host: int) -> int:
        return host // self.hosts_per_leaf


def pairs(pattern: str, clos: Clos) -> list[tuple[int, int]]:
    """(source, destination) host indices of ``pattern``: ``permutation`` (each host to
    the host with its index on the next rack) or ``all_to_all`` (each host to every host
    of every other rack)."""
    n, h = clos.hosts, clos.hosts_per_leaf
    if pattern == "permutation":
        return [(i, (i + h) % n) for i in range(n)]
    if pattern == "all_to_all":
        return [(i, j) for i in range(n) for j in range(n) if clos.leaf(i) != clos.leaf(j)]
    raise ValueError(f"pattern {pattern!r} is invalid: must be one of {', '.join(PATTERNS)}")


def _hashed(system: str) -> registry.Capabilities:
    """``system``'s capabilities, if ECMP hashes its connections (ValueError otherwise)."""
    hashed = registry.names(lambda t: t.caps.transfers and not t.caps.multipath)
    if system not in hashed:
        raise ValueError(f"system {system!r} is not hashed by ECMP: must be "
                         f"{' or '.join(hashed)}")
    return registry.get(system).caps


def lanes(system: str, clos: Clos) -> int:
    """Connections per host pair: one per plane (RC), else one (TCP)."""
    return clos.planes if _hashed(system).per_plane else 1


def occupancy(pattern: str, system: str, clos: Clos) -> float:
    """The balls-into-bins expectation (module docstring) as a fraction of the ideal."""
    per_leaf = sum(1 for s, _ in pairs(pattern, clos) if clos.leaf(s) == 0)
    n_lanes = lanes(system, clos)
    # per plane (RC): F = per_leaf connections of one plane onto its spines; else (TCP):
    # onto all of them
    f, n = ((per_leaf, clos.spines) if _hashed(system).per_plane
            else (per_leaf, clos.planes * clos.spines))
    occupied = balls_into_bins(f, n) * min(f, n)
    # a TCP connection uses one NIC: a host with fewer connections than NICs idles some
    usable = min(1.0, per_leaf * n_lanes / (clos.hosts_per_leaf * clos.planes))
    return min(usable, occupied / n)


def _loads(src: np.ndarray, dst: np.ndarray, size: np.ndarray, plane: np.ndarray,
           spine: np.ndarray, clos: Clos) -> np.ndarray:
    """Per sample, the largest load (bytes) on any link; arrays are (samples, conns)."""
    p, s, lv, h = clos.planes, clos.spines, clos.leaves, clos.hosts
    lsrc, ldst = src // clos.hosts_per_leaf, dst // clos.hosts_per_leaf
    keys = [src * p + plane,  # host NIC up
            h * p + (lsrc * p + plane) * s + spine,  # leaf -> spine
            h * p + lv * p * s + (plane * s + spine) * lv + ldst,  # spine -> leaf
            h * p + 2 * lv * p * s + dst * p + plane]  # leaf -> destination NIC
    n_links = h * p * 2 + 2 * lv * p * s
    rows = src.shape[0]
    offset = (np.arange(rows) * n_links)[:, None]
    total = np.zeros(rows * n_links)
    for k in keys:
        total += np.bincount((k + offset).ravel(), weights=np.broadcast_to(size, k.shape).ravel(),
                             minlength=rows * n_links)
    return total.reshape(rows, n_links).max(axis=1)


def completion(pattern: str, system: str, clos: Clos, *, samples: int = 4000,
               seed: int = 0) -> tuple[float, float, float]:
    """E[ideal time / bottleneck time] under ECMP hashing, with its 5th and 95th
    percentiles over the hashings: (mean, p5, p95) (module docstring)."""
    if samples < 100:
        raise ValueError(f"samples={samples} is invalid: must be >= 100")
    ps = pairs(pattern, clos)
    n_lanes = lanes(system, clos)
    rng = np.random.default_rng(seed)
    src = np.repeat(np.array([a for a, _ in ps]), n_lanes)
    dst = np.repeat(np.array([b for _, b in ps]), n_lanes)
    size = np.full(src.shape, 1.0 / n_lanes)
    shape = (samples, src.size)
    if _hashed(system).per_plane:  # a connection per plane, each on its own
        plane = np.broadcast_to(np.tile(np.arange(clos.planes), len(ps)), shape)
    else:
        plane = rng.integers(0, clos.planes, shape)
    spine = rng.integers(0, clos.spines, shape)
    bottleneck = _loads(np.broadcast_to(src, shape), np.broadcast_to(dst, shape), size,
                        plane, spine, clos)
    ideal = ideal_load(ps, clos)
    ratio = ideal / bottleneck
    lo, hi = np.percentile(ratio, [5, 95])
    return float(ratio.mean()), float(lo), float(hi)


def ideal_load(ps: Sequence[tuple[int, int]], clos: Clos) -> float:
    """The most loaded link's bytes when every pair is sprayed evenly over every
    (plane, spine): the ideal the measured goodputs are fractions of."""
    p, s = clos.planes, clos.spines
    grid = np.array([(a, b, pl, sp) for a, b in ps for pl in range(p) for sp in range(s)])
    a, b, pl, sp = (grid[:, i][None, :] for i in range(4))
    return float(_loads(a, b, np.full(a.shape, 1.0 / (p * s)), pl, sp, clos)[0])
