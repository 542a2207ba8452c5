"""The GPU decode node (paper 4.1, 4.2, 5.2): a Llama decoder in PyTorch, clustering of long
requests' keys, length-aware routing and the hybrid GPU-PNM decode step."""
