"""Fakes and harnesses: the seeded in-memory network the cores are tested on
(fakenet.py), hostile datagrams (hostile.py), and the runs over a real fabric: message
transfers with one driver per host (harness.py) and the soak (soak.py)."""
