"""Transport protocols carried over the emulated fabric.

- ``transports.registry``: one declaration per transport (its name, settings dataclass,
  core factory and capabilities), read by every layer above;
- ``transports.core``: the sans-I/O protocol cores (wire format, MRC and its parts, RC,
  DBLP): pure state machines fed with datagrams and ``now``, no socket, no clock;
- ``transports.io``: what binds cores to UDP sockets in a host's namespace (the one
  event loop, the driver process, the in-process engine) and the kernel-TCP baseline;
- ``transports.plan``: pure planning of connections and test messages;
- ``transports.testing``: the fake in-memory network, hostile datagrams, the transfer
  harness and the soak over a fabric.
"""
