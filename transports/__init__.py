"""Transport protocols carried over the emulated fabric: one wire format; sans-I/O cores
of MRC, RC and DBLP (pure state machines fed with packets and timer ticks); the drivers
and the in-process engine that bind them to UDP sockets in the emulator's namespaces;
the kernel-TCP baseline; harness and benchmarks."""
