"""Bit-exact Python models of the PNM device and float64 references."""
