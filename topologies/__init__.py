"""Pure-data descriptions of multi-plane Clos fabrics and scale-across DCs.

Nothing in this package needs root or touches the kernel: it describes
nodes, links, the IPv6/SRv6 addressing plan and equal-cost paths, which the
emulator then instantiates.
"""

from topologies import addressing
from topologies.addressing import ALL_HOSTS
from topologies.clos import Link, LinkSpec, MultiPlaneClos, Node, Port, Role
from topologies.errors import TopologyError
from topologies.paths import Hop, Path, build_path, enumerate_paths
from topologies.scaleacross import DciSpec, ScaleAcross

__all__ = [
    "ALL_HOSTS",
    "DciSpec",
    "Hop",
    "Link",
    "LinkSpec",
    "MultiPlaneClos",
    "Node",
    "Path",
    "Port",
    "Role",
    "ScaleAcross",
    "TopologyError",
    "addressing",
    "build_path",
    "enumerate_paths",
]
