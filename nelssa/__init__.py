"""NELSSA emulator: GPU-PNM heterogeneous LLM serving, from bit-true RTL to trace replay."""

__version__ = "0.1.0"
