"""The fabric's traffic classes: what a packet's IPv6 traffic class means to a switch.

Control packets (ACKs, NACKs, probes) carry DSCP EF (traffic class 0xb8); switches give
them strict priority, as fabrics do for ACKs and congestion notifications, so a data
queue does not delay the feedback that drives congestion control. Shared by the
switches' queueing (emu/kernel.py) and the transports' senders (transports/io/driver.py);
no dependencies, so both layers read it from here.
"""

CTRL_TCLASS = 0xB8
