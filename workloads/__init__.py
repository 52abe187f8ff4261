"""Training workloads on the emulated fabric: collectives over the transports, PyTorch
workers (data-parallel through a DDP communication hook, or pipeline stages), experiment
files, the runner, results and plots (see docs/concepts/training.md)."""
