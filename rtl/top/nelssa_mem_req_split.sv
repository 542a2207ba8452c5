// The device's memory requests (nelssa_dev_pkg::mem_req_t, one per port) as a memory's ports take
// them: the fields apart, the address cut to AddrW bits. The bits above are zero (the device
// checks every address against its ranges before it asks), so they are dropped. Part of
// nelssa_device_wrap, the device as both tops wire it to their memory.
module nelssa_mem_req_split
  import nelssa_dev_pkg::*;
#(
  parameter int unsigned NumPorts = 6,  // memory ports of the device (units + 2)
  parameter int unsigned AddrW    = 36  // address bits the memory decodes (1..64)
) (
  input  mem_req_t [NumPorts-1:0]            req_i,
  output logic     [NumPorts-1:0]            write_o,
  output logic     [NumPorts-1:0][AddrW-1:0] addr_o,
  output logic     [NumPorts-1:0][MEM_TAG_W-1:0]  tag_o,
  output logic     [NumPorts-1:0][LINE_W-1:0]     wdata_o,
  output logic     [NumPorts-1:0][LINE_BYTES-1:0] wstrb_o
);
  if (NumPorts < 1 || AddrW < 1 || AddrW > 64) begin : gen_param_check
    $error("nelssa_mem_req_split: NumPorts >= 1 and AddrW 1..64");
  end

  for (genvar p = 0; p < NumPorts; p++) begin : gen_port
    assign write_o[p] = req_i[p].write;
    assign addr_o[p]  = req_i[p].addr[AddrW-1:0];
    assign tag_o[p]   = req_i[p].tag;
    assign wdata_o[p] = req_i[p].wdata;
    assign wstrb_o[p] = req_i[p].wstrb;
    // the address bits above AddrW: zero, see above
    if (AddrW < 64) begin : gen_high
      /* verilator lint_off UNUSEDSIGNAL */
      logic unused_high;
      assign unused_high = ^req_i[p].addr[63:AddrW];
      /* verilator lint_on UNUSEDSIGNAL */
    end
  end
endmodule
