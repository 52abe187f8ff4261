"""Measuring the transports' dimensionless figures (`emu calibrate`) and the calibration
record the explorer reads."""
