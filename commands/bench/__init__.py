"""`emu bench ...`: the benchmarks, one module each, kept out of the product layers.

fabric.py (building fabrics), failover.py (BFD/BGP failover), transport.py (MRC, RC and
TCP transfers) with cpu.py (what a packet costs), bursts.py (microbursts on the fake
network), robustness.py (hostile datagrams, the soak, the largest fabric),
allreduce.py, dblp.py with dblp_rounds.py, training.py (collectives, DBLP rounds, training
jobs), acks.py (coalesced ACKs on the fake network) and sweep.py (the Ray path's cost per
point); run.py names the function behind each `emu bench NAME`.
"""
