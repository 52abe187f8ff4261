"""What binds the sans-I/O cores to a host's UDP sockets: the one event loop (loop.py),
the driver process (driver.py) and the in-process engine of a training worker
(endpoint.py), with their sockets (sockets.py); and the kernel-TCP baseline (tcp.py)."""
