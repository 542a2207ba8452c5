// Depth registers in a row (0: a wire): the pipeline registers of the staged arithmetic units.
// No reset: the units' users know from the schedule which cycles' results are valid.
module nelssa_pipe #(
  parameter int unsigned Width = 32,  // bits of d_i and q_o
  parameter int unsigned Depth = 1    // registers from d_i to q_o (cycles)
) (
  input  logic             clk_i,
  input  logic [Width-1:0] d_i,
  output logic [Width-1:0] q_o
);
  if (Depth == 0) begin : gen_wire
    /* verilator lint_off UNUSEDSIGNAL */
    logic unused_clk;  // no register to clock
    /* verilator lint_on UNUSEDSIGNAL */
    assign unused_clk = clk_i;
    assign q_o = d_i;
  end else begin : gen_regs
    logic [Depth-1:0][Width-1:0] q;
    always_ff @(posedge clk_i) begin
      q[0] <= d_i;
      for (int unsigned i = 1; i < Depth; i++) q[i] <= q[i-1];
    end
    assign q_o = q[Depth-1];
  end
endmodule
