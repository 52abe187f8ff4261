"""`emu sweep`."""
