"""The sans-I/O protocol cores: state machines that take datagrams and ``now`` and return
datagrams to send (transports/core/api.py). Nothing here opens a socket, reads a clock or
starts a thread (the import-linter contract "protocol cores are sans-I/O" checks it).

Shared parts: the wire format (wire.py), messages and placement (message.py), the
receiving half (receiver.py), RTT estimation and RTOs (rto.py), the NSCC window (cc.py),
spurious-retransmission bookkeeping (spurious.py), loss bounds (bound.py), settings
validation (knobs.py). Transports: MRC (mrc/), RC (rc.py), DBLP (dblp/).
"""
