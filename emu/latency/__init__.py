"""Analytical decode-latency model of both tiers and the hardware-derived routing threshold
(paper 4.1), fed by hardware description files."""
