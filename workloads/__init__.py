"""Workloads that drive traffic through the emulated fabric.

This package will hold the collective-communication patterns (all-reduce,
all-gather, reduce-scatter, all-to-all and their ring/tree schedules) run over
the transports, and the PyTorch training jobs whose gradient exchange is carried
by those collectives across the emulated hosts.
"""
