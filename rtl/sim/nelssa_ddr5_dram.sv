// Data side of one simulated DDR5 sub-channel (simulation only): executes the controller's
// READ and WRITE commands on a sparse C++ backing store (hw/sim/ddr5_store.cpp, DPI-C) and
// returns read data when its burst ends (tCK + nCL + burst, rounded up to a controller cycle).
// Write data waits in a buffer by request tag until its WRITE command. Every command also goes
// through the always-on timing checker.
module nelssa_ddr5_dram
  import nelssa_ddr5_pkg::*;
#(
  parameter timing_t     T     = DDR5_6400,  // timing preset (nelssa_ddr5_pkg)
  parameter int unsigned SubId = 0,          // sub-channel number (part of the store key)
  parameter int unsigned TagW  = 16          // request tag width
) (
  input  logic                  clk_i,
  input  logic                  rst_ni,
  // the controller's command slots
  input  logic      [2:0]       cmd_valid_i,
  input  dram_cmd_e [2:0]       cmd_i,
  input  logic      [2:0][63:0] cmd_tck_i,
  input  logic      [2:0][2:0]  cmd_bg_i,
  input  logic      [2:0][1:0]  cmd_bank_i,
  input  logic      [2:0][16:0] cmd_row_i,
  input  logic      [5:0]       cmd_col_i,
  input  logic      [TagW-1:0]  cmd_tag_i,
  // write data, given when the write request is accepted
  input  logic                  wdata_valid_i,
  input  logic      [TagW-1:0]  wdata_tag_i,
  input  logic      [511:0]     wdata_i,
  input  logic      [63:0]      wstrb_i,
  // read data
  output logic                  rdata_valid_o,
  output logic      [TagW-1:0]  rdata_tag_o,
  output logic      [511:0]     rdata_o,
  output logic      [31:0]      violations_o
);
  import "DPI-C" function void nelssa_store_write(input longint key, input bit [511:0] data,
                                                  input bit [63:0] strobe);
  import "DPI-C" function void nelssa_store_read(input longint key, output bit [511:0] data);

  typedef struct {
    longint          ready_cycle;
    logic [TagW-1:0] tag;
    logic [511:0]    data;
  } response_t;

  logic [511:0]    wbuf [logic [TagW-1:0]];
  logic [63:0]     wstrb [logic [TagW-1:0]];
  response_t       responses [$];
  longint          cycle;
  /* verilator lint_off UNUSEDSIGNAL */
  logic [NUM_RULES-1:0] violation;  // the checker's per-clock mask; its count is what we report
  /* verilator lint_on UNUSEDSIGNAL */

  nelssa_ddr5_checker #(
    .T       (T),
    .NumSlots(3),
    .Fatal   (1'b1)
  ) u_checker (
    .clk_i       (clk_i),
    .rst_ni      (rst_ni),
    .cmd_valid_i (cmd_valid_i),
    .cmd_i       (cmd_i),
    .tck_i       (cmd_tck_i),
    .bg_i        (cmd_bg_i),
    .bank_i      (cmd_bank_i),
    .row_i       (cmd_row_i),
    .violation_o (violation),
    .violations_o(violations_o)
  );

  function automatic longint line_key(logic [2:0] bg, logic [1:0] bank, logic [16:0] row,
                                      logic [5:0] col);
    return (longint'(SubId) <<< 40) | (longint'(row) <<< 11) | (longint'({bg, bank}) <<< 6)
           | longint'(col);
  endfunction

  // Everything happens at the clock edge that ends a cycle: the response shown during that
  // cycle leaves, new commands execute, and the response of the next cycle is chosen.
  always @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      cycle = 0;
      responses.delete();
      wbuf.delete();
      wstrb.delete();
      rdata_valid_o <= 1'b0;
      rdata_tag_o   <= '0;
      rdata_o       <= '0;
    end else begin
      if (rdata_valid_o) void'(responses.pop_front());
      if (wdata_valid_i) begin
        wbuf[wdata_tag_i] = wdata_i;
        wstrb[wdata_tag_i] = wstrb_i;
      end
      if (cmd_valid_i[0]) begin
        automatic longint key = line_key(cmd_bg_i[0], cmd_bank_i[0], cmd_row_i[0], cmd_col_i);
        if (cmd_i[0] == CMD_WR) begin
          if (!wbuf.exists(cmd_tag_i)) $fatal(1, "WRITE for tag %0d without write data", cmd_tag_i);
          nelssa_store_write(key, wbuf[cmd_tag_i], wstrb[cmd_tag_i]);
          wbuf.delete(cmd_tag_i);
          wstrb.delete(cmd_tag_i);
        end else begin
          automatic response_t r;
          automatic bit [511:0] data;
          nelssa_store_read(key, data);
          r.ready_cycle = (longint'(cmd_tck_i[0]) + longint'(T.nCL) + 64'sd8 + 64'sd3) / 4;
          r.tag = cmd_tag_i;
          r.data = data;
          responses.push_back(r);
        end
      end
      cycle = cycle + 1;
      // reads finish in the order they issued
      if (responses.size() > 0 && responses[0].ready_cycle <= cycle) begin
        rdata_valid_o <= 1'b1;
        rdata_tag_o   <= responses[0].tag;
        rdata_o       <= responses[0].data;
      end else begin
        rdata_valid_o <= 1'b0;
      end
    end
  end
endmodule
