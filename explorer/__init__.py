"""Full-scale projection from calibrated emulator results.

This package will hold the explorer, which takes measurements from small
emulated fabrics (throughput, tail latency, loss and recovery behaviour per
transport and topology), calibrates a model on them, and projects the results to
full-size multi-plane Clos clusters that are too large to emulate packet by packet.
"""
