"""`emu reproduce`."""
