"""A trace-driven discrete-event serving emulator: GPU-only (vLLM-like) against NELSSA, step
costs from the latency model (paper 8.1, 8.3)."""
