"""The device interface written as the SystemVerilog package the RTL is built against.

Register offsets, descriptor, completion and cluster-directory layouts and port-message opcodes
from ``regs``, ``formats`` and ``cxl``. The interface hash (``iface.interface_digest``) is the
SHA-256 of these lines, so it changes exactly when the interface does; ``nelssa.gen`` writes them,
with a header and the hash line, to ``rtl/top/nelssa_dev_pkg.sv``.
"""

from __future__ import annotations

import hashlib

from nelssa.driver import cxl, formats, regs


def enum_lines(name: str, width: int, prefix: str, members) -> list[str]:
    """An SV ``typedef enum`` of an IntEnum's members."""
    members = list(members)
    lines = [f"  typedef enum logic [{width - 1}:0] {{"]
    for i, m in enumerate(members):
        sep = "," if i < len(members) - 1 else ""
        lines.append(f"    {prefix}{m.name} = {width}'d{m.value}{sep}")
    return [*lines, f"  }} {name};", ""]


def field_lines(prefix: str, struct) -> list[str]:
    """Byte offset and width of every named field of a fixed-size construct struct."""
    lines, pos = [], 0
    for sub in struct.subcons:
        size = sub.sizeof()
        if sub.name:
            lines.append(f"  localparam int unsigned {prefix}_{sub.name.upper()}_OFF = {pos};")
            lines.append(f"  localparam int unsigned {prefix}_{sub.name.upper()}_BYTES = {size};")
        pos += size
    return [*lines, ""]


def dev_pkg_lines() -> list[str]:
    """``package nelssa_dev_pkg; ... endpackage`` without header comment or hash line."""
    lines = [
        "package nelssa_dev_pkg;",
        f"  localparam logic [31:0] DEVICE_MAGIC = 32'h{regs.DEVICE_MAGIC:08X};",
        f"  localparam logic [31:0] DEVICE_VERSION = 32'h{regs.DEVICE_VERSION:08X};",
        f"  localparam logic [31:0] UNMAPPED_VALUE = 32'h{regs.UNMAPPED_VALUE:08X};",
        f"  localparam int unsigned REG_WINDOW_BYTES = {regs.REG_WINDOW_BYTES};",
        f"  localparam int unsigned RING_MAX_ENTRIES = {regs.RING_MAX_ENTRIES};",
        "",
        "  // registers: offset, then whether software may write them",
    ]
    for r in regs.REGISTERS:
        lines.append(f"  localparam logic [11:0] REG_{r.name} = 12'h{r.offset:03X};  "
                     f"// {r.access.name}")
    lines += ["", f"  localparam int unsigned LINE_BYTES = {formats.LINE_BYTES};",
              f"  localparam int unsigned DESC_BYTES = {formats.DESC_BYTES};",
              f"  localparam int unsigned COMPLETION_BYTES = {formats.COMPLETION_BYTES};",
              f"  localparam int unsigned CLUSTER_ENTRY_BYTES = {formats.CLUSTER_ENTRY_BYTES};",
              f"  localparam int unsigned MAX_IDS = {formats.MAX_IDS};", ""]
    lines += enum_lines("desc_opcode_e", 8, "OP_", formats.DescOpcode)
    lines += enum_lines("desc_status_e", 8, "DESC_", formats.DescStatus)
    lines += field_lines("DESC", formats.DESCRIPTOR)
    lines += field_lines("CPL", formats.COMPLETION)
    lines += field_lines("CLU", formats.CLUSTER_ENTRY)
    lines += enum_lines("cxl_channel_e", 8, "CH_", cxl.Channel)
    lines += enum_lines("m2s_req_opcode_e", 8, "M2S_REQ_", cxl.M2SReqOpcode)
    lines += enum_lines("m2s_rwd_opcode_e", 8, "M2S_RWD_", cxl.M2SRwDOpcode)
    lines += enum_lines("mmio_opcode_e", 8, "MMIO_", cxl.MmioOpcode)
    lines += enum_lines("rsp_status_e", 8, "RSP_", cxl.RspStatus)
    lines.append("endpackage")
    return lines


def dev_pkg_digest() -> str:
    """SHA-256 (hex) of the device interface: the lines of ``dev_pkg_lines``."""
    return hashlib.sha256("\n".join(dev_pkg_lines()).encode()).hexdigest()
