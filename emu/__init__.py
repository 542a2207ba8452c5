"""Emulated links, latency model and serving emulator."""
