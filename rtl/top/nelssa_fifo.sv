// A FIFO with one push and one pop per cycle, the head readable without popping. The storage
// has no reset (only the pointers do), so FPGA tools map it to RAM rather than flip-flops.
// BlockRam: the storage is read through a register (block RAM on an FPGA, where a wide FIFO's
// distributed RAM costs four LUTs per 16 x 4 bits), read a cycle ahead at the next head's
// place; an entry pushed onto that place on that edge comes from a bypass register. The head
// is the same in every cycle as the asynchronous read's (tests/rtl/test_fifo.py runs both).
`include "nelssa_assert.svh"

module nelssa_fifo #(
  parameter int unsigned Width = 16,  // bits per entry
  parameter int unsigned Depth = 32,  // entries (power of two)
  parameter bit BlockRam = 1'b0,      // storage read through a register (block RAM)
  localparam int unsigned CntW = $clog2(Depth + 1)  // count width
) (
  input  logic             clk_i,
  input  logic             rst_ni,
  input  logic             push_i,   // must not be set when full_o
  input  logic [Width-1:0] data_i,
  input  logic             pop_i,    // must not be set when empty
  output logic [Width-1:0] head_o,
  output logic             full_o,
  output logic             empty_o
);
  localparam int unsigned PtrW = $clog2(Depth);

  if (Depth < 2 || (Depth & (Depth - 1)) != 0) begin : gen_depth_check
    $error("nelssa_fifo: Depth must be a power of two >= 2");
  end

  logic [PtrW-1:0]  wptr_q, rptr_q;
  logic [CntW-1:0]  count_q;

  if (BlockRam) begin : gen_reg_read
    // ram_style: block RAM on AMD parts too, where a shallow one would otherwise go to LUT RAM
    // beside the read register and bypass; a registered read of the entry written on the same
    // edge is never used (the bypass gives it; no_rw_check: yosys adds no logic to define it)
    (* ram_style = "block", no_rw_check *) logic [Width-1:0] mem_q [Depth];
    always_ff @(posedge clk_i) begin
      if (push_i) mem_q[wptr_q] <= data_i;
    end
    logic [PtrW-1:0]  rptr_d;     // the head's place after this edge
    logic [Width-1:0] rd_q;       // mem_q[rptr_d] as it was before the edge
    logic [Width-1:0] byp_q;      // the entry pushed onto rptr_d on the edge
    logic             use_byp_q;  // ... and it is the head
    assign rptr_d = rptr_q + PtrW'(pop_i);
    always_ff @(posedge clk_i) begin
      rd_q <= mem_q[rptr_d];
      if (push_i) byp_q <= data_i;
    end
    always_ff @(posedge clk_i or negedge rst_ni) begin
      if (!rst_ni) use_byp_q <= 1'b0;
      else use_byp_q <= push_i && (wptr_q == rptr_d);
    end
    assign head_o = use_byp_q ? byp_q : rd_q;
  end else begin : gen_async_read
    logic [Width-1:0] mem_q [Depth];
    always_ff @(posedge clk_i) begin
      if (push_i) mem_q[wptr_q] <= data_i;
    end
    assign head_o = mem_q[rptr_q];
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      wptr_q <= '0;
      rptr_q <= '0;
      count_q <= '0;
    end else begin
      if (push_i) wptr_q <= wptr_q + 1'b1;
      if (pop_i) rptr_q <= rptr_q + 1'b1;
      if (push_i && !pop_i) count_q <= count_q + 1'b1;
      else if (pop_i && !push_i) count_q <= count_q - 1'b1;
    end
  end

  assign full_o = count_q == CntW'(Depth);
  assign empty_o = count_q == '0;

  // the user's side of the contract: no push when full, no pop when empty
  `NELSSA_ASSERT_NEVER(FifoOverflow, push_i && full_o)
  `NELSSA_ASSERT_NEVER(FifoUnderflow, pop_i && empty_o)
endmodule
