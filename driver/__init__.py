"""PNM user library: formats, the device port, Memory and Command APIs."""
