"""Emulated links: framed messages over real ZeroMQ sockets, with a timing model per direction
(latency, bandwidth, serialization queueing) and injectable faults. Knows nothing of devices or
LLMs (DESIGN.md layering: layer 1)."""
