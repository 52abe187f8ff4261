"""Collective operations over any transport: schedules as data, their executor, and the
``Comm`` of each transport."""
