"""The switch ports' eBPF program: its C source (port.c), built from it on this machine
(build.py), loaded through libbpf (libbpf.py)."""
