"""NelssaHost on the PNM node and the GPU decode node."""
