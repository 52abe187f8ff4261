"""`emu bench ...`: the benchmarks, one module each, kept out of the product layers.

fabric.py (building fabrics), failover.py (BFD/BGP failover), transport.py (MRC, RC and
TCP transfers) with cpu.py (what a packet costs), bursts.py (microbursts on the fake
network), robustness.py (hostile datagrams, the soak, the largest fabric),
allreduce.py, dblp.py, training.py (collectives, DBLP rounds, training jobs) and
sweep.py (the Ray path's cost per point).
"""
