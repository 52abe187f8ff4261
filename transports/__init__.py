"""Transport protocols carried over the emulated fabric.

This package will hold the wire format shared by the transports, the sans-I/O
protocol cores of MRC (multipath reliable connection), RC (single-path reliable
connection) and DBLP, each a pure state machine fed with packets and timer ticks
and returning packets to send, and the UDP drivers that bind those cores to real
sockets inside the emulator's network namespaces.
"""
