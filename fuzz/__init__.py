"""Fuzzing the appliance's readers: `python -m fuzz` (what `make fuzz` runs)."""
