"""The side-effect layer: Mininet namespaces, netlink links/queues/routes, CLI."""
