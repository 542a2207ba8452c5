"""The ``fpga`` backend: a NELSSA device on a board, reached through PCIe BARs (sysfs
``resourceN`` files, memory-mapped) and an XDMA-style DMA channel, behind the same port as the
``model`` and ``rtl`` backends; the bitstream manifest that says which device a board holds; and
a file-backed fake board served by the ``model`` device, so the same code path runs in CI."""
