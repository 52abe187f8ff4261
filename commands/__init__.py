"""The top layer: the ``emu`` command (commands/cli.py), the one place that imports
every other layer (topologies, emu, transports, workloads, explorer)."""
