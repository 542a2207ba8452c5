// Latency registers of a pipelined arithmetic unit, or a delay line beside one: d_i and en_i of
// cycle t appear on q_o and en_o at cycle t + Latency; Latency 0 is a wire. The data registers
// have no reset and no function between them, so a vendor flow's retiming may move them into
// the logic in front (the unit's function). en_o's registers are reset: a delay line's en_o
// marks the data that is valid.
// A simulation built with NELSSA_FP_GATED loads the data registers only with en_i (the enable
// travels down the pipe with the data), so an idle unit's pipe does not toggle; hardware loads
// them every cycle (no enable in front of the retimed logic).
module nelssa_pipe #(
  parameter int unsigned Width   = 32,  // data bits
  parameter int unsigned Latency = 0    // register stages between d_i and q_o
) (
  input  logic             clk_i,
  input  logic             rst_ni,
  input  logic             en_i,
  input  logic [Width-1:0] d_i,
  output logic             en_o,
  output logic [Width-1:0] q_o
);
  // (Latency 0 reads neither clk_i nor rst_ni: rtl/verilator.vlt waives that, as a signal
  // made of them would be evaluated at every clock edge in each of the engine's many pipes)
  if (Latency == 0) begin : gen_wire
    assign en_o = en_i;
    assign q_o  = d_i;
  end else begin : gen_regs
    logic [Latency-1:0]            en_q;
    logic [Latency-1:0][Width-1:0] d_q;

    always_ff @(posedge clk_i or negedge rst_ni) begin
      if (!rst_ni) begin
        en_q <= '0;
      end else begin
        en_q[0] <= en_i;
        // verilator unroll_full
        for (int s = 1; s < Latency; s++) en_q[s] <= en_q[s-1];
      end
    end

    always_ff @(posedge clk_i) begin
`ifdef NELSSA_FP_GATED
      if (en_i) d_q[0] <= d_i;
      // verilator unroll_full
      for (int s = 1; s < Latency; s++) begin
        if (en_q[s-1]) d_q[s] <= d_q[s-1];
      end
`else
      d_q[0] <= d_i;
      // verilator unroll_full
      for (int s = 1; s < Latency; s++) d_q[s] <= d_q[s-1];
`endif
    end

    assign en_o = en_q[Latency-1];
    assign q_o  = d_q[Latency-1];
  end
endmodule
