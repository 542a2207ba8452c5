// In-order line reader: takes 64-byte line addresses, keeps up to Depth reads in flight on one
// memory port (tag = sequence number), and returns the data in address order whatever order the
// sub-channels answer in (a reorder buffer indexed by tag). Its user takes all the data it asked
// for before it asks for more of something else. The buffer has a bank per lane, each written
// by its lane only (one write port: RAM on an FPGA), and a small table of which bank holds
// each line. A bank's read is registered (block RAM on an FPGA) and made a cycle ahead, at
// the line to deliver the next cycle; a line written on that same edge comes from a bypass
// register instead, so a line still leaves the cycle after it arrives.
`include "nelssa_assert.svh"

module nelssa_line_reader
  import nelssa_dev_pkg::*;
#(
  parameter int unsigned AddrW = 40,         // device-memory address width
  parameter int unsigned Depth = 64,         // reads in flight (reorder-buffer lines), power of two
  parameter int unsigned Lanes = MEM_LANES   // read-data lanes that carry data (the lowest ones)
) (
  input  logic                     clk_i,
  input  logic                     rst_ni,
  // line addresses, in the order their data is wanted
  input  logic                     addr_valid_i,
  output logic                     addr_ready_o,
  input  logic [AddrW-1:0]         addr_i,
  // memory port (reads only)
  output logic                     mem_valid_o,
  input  logic                     mem_ready_i,
  output logic [AddrW-1:0]         mem_addr_o,
  output logic [MEM_TAG_W-1:0]     mem_tag_o,
  // read data of this port, per sub-channel lane
  input  logic [MEM_LANES-1:0]                rd_valid_i,
  input  logic [MEM_LANES-1:0][MEM_TAG_W-1:0] rd_tag_i,
  input  logic [MEM_LANES-1:0][LINE_W-1:0]    rd_data_i,
  // data, in order
  output logic                     out_valid_o,
  input  logic                     out_ready_i,
  output logic [LINE_W-1:0]        out_data_o,
  output logic                     idle_o      // nothing in flight or buffered
);
  localparam int unsigned IW = $clog2(Depth);
  localparam int unsigned LW = (Lanes > 1) ? $clog2(Lanes) : 1;

  if (Depth < 2 || (Depth & (Depth - 1)) != 0 || Depth > 32768) begin : gen_depth_check
    $error("nelssa_line_reader: Depth must be a power of two in 2..32768");
  end
  if (Lanes < 1 || Lanes > MEM_LANES) begin : gen_lanes_check
    $error("nelssa_line_reader: Lanes must be 1..MEM_LANES");
  end

  logic [MEM_TAG_W-1:0] issue_q, deliver_q;  // sequence numbers: next to issue, next to deliver
  logic [Depth-1:0] have_q;
  logic [LW-1:0] bank_of_q [Depth];  // which lane's bank holds each line
  logic [Lanes-1:0][LINE_W-1:0] bank_out;
  logic [MEM_TAG_W-1:0] in_flight;
  logic [IW-1:0] next_idx;          // the line delivered the next cycle
  logic [Lanes-1:0] byp_hit;        // a lane writes that line now
  logic byp_sel_q;                  // the line out is the bypass register's
  logic [LINE_W-1:0] byp_q, byp_d;

  assign next_idx = deliver_q[IW-1:0] + IW'(out_valid_o && out_ready_i);

  for (genvar l = 0; l < Lanes; l++) begin : gen_bank
    // no reset: RAM; a read of the line written on the same edge is never used (the bypass
    // gives it): no_rw_check, yosys adds no logic to define it
    (* no_rw_check *) logic [LINE_W-1:0] bank_q [Depth];
    logic [LINE_W-1:0] rd_q;
    always_ff @(posedge clk_i) begin
      if (rd_valid_i[l]) bank_q[rd_tag_i[l][IW-1:0]] <= rd_data_i[l];
      rd_q <= bank_q[next_idx];
    end
    assign bank_out[l] = rd_q;
    assign byp_hit[l] = rd_valid_i[l] && rd_tag_i[l][IW-1:0] == next_idx;
  end

  always_comb begin
    byp_d = byp_q;
    // verilator unroll_full
    for (int l = 0; l < Lanes; l++) if (byp_hit[l]) byp_d = rd_data_i[l];
  end

  always_ff @(posedge clk_i) begin  // no reset: data
    byp_q <= byp_d;
  end

  assign in_flight = issue_q - deliver_q;
  assign mem_valid_o = addr_valid_i && in_flight < MEM_TAG_W'(Depth);
  assign mem_addr_o = addr_i;
  assign mem_tag_o = issue_q;
  assign addr_ready_o = mem_valid_o && mem_ready_i;
  assign out_valid_o = have_q[deliver_q[IW-1:0]];
  assign out_data_o = byp_sel_q ? byp_q
                                 : bank_out[(Lanes > 1) ? int'(bank_of_q[deliver_q[IW-1:0]]) : 0];
  assign idle_o = in_flight == '0;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      issue_q <= '0;
      deliver_q <= '0;
      have_q <= '0;
      byp_sel_q <= 1'b0;
    end else begin
      automatic logic [Depth-1:0] have = have_q;
      if (out_valid_o && out_ready_i) begin
        have[deliver_q[IW-1:0]] = 1'b0;
        deliver_q <= deliver_q + 1'b1;
      end
      // verilator unroll_full
      for (int l = 0; l < Lanes; l++) begin
        if (rd_valid_i[l]) begin
          have[rd_tag_i[l][IW-1:0]] = 1'b1;
          bank_of_q[rd_tag_i[l][IW-1:0]] <= LW'(l);
        end
      end
      have_q <= have;
      byp_sel_q <= |byp_hit;
      if (addr_ready_o) issue_q <= issue_q + 1'b1;
    end
  end

  // ---- protocol rules ---------------------------------------------------------------------------
  // the user offers an address until it is taken; the data out is held until taken
  `NELSSA_ASSERT_HOLD(AddrHeld, addr_valid_i, addr_ready_o, addr_i)
  `NELSSA_ASSERT_HOLD(OutHeld, out_valid_o, out_ready_i, out_data_o)
  `NELSSA_ASSERT(InFlightBounded, in_flight <= MEM_TAG_W'(Depth))
  // the memory answers each read once: a line comes back only for a read in flight and not
  // yet answered
  for (genvar l = 0; l < Lanes; l++) begin : gen_lane_rules
    `NELSSA_ASSERT_NEVER(ReadNotInFlight,
                         rd_valid_i[l] && MEM_TAG_W'(rd_tag_i[l] - deliver_q) >= in_flight)
    `NELSSA_ASSERT_NEVER(ReadAnsweredTwice, rd_valid_i[l] && have_q[rd_tag_i[l][IW-1:0]])
  end

  if (Lanes < MEM_LANES) begin : gen_idle_lanes
    /* verilator lint_off UNUSEDSIGNAL */
    logic unused;  // lanes above Lanes carry nothing for this reader
    /* verilator lint_on UNUSEDSIGNAL */
    assign unused = ^{rd_valid_i[MEM_LANES-1:Lanes], rd_tag_i[MEM_LANES-1:Lanes],
                   rd_data_i[MEM_LANES-1:Lanes]};
  end
endmodule
