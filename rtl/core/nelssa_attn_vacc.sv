// The V accumulation of one query head of the attention engine (nelssa_attn_engine): per lane
// o = o * (first row ? alpha : 1) + p * v for every V beat, and the denominator
// l = l * (first row ? alpha : 1) + p once per row; x * 1 is x for every value they can hold.
// A V beat is taken a chunk of ComputeLanes lanes a cycle (the lanes are independent, so the
// order of each lane's operations is the one of a whole beat). A chunk's adds are issued when its
// products have come through the multipliers (ctrl_i.vi_*); the o (and l) they read is the one
// of the row before, taken from the adder's output when it appears in that very cycle (the
// engine spaces a part's beats AddLatency cycles apart).
module nelssa_attn_vacc
  import nelssa_engine_pkg::*;
  import nelssa_attn_pkg::*;
#(
  parameter int unsigned HeadDim      = 128,  // largest head_dim accepted: 64 or 128
  parameter int unsigned ComputeLanes = 32,   // lanes computed a cycle: a power of two, 1..32
  parameter int unsigned AddLatency = 0,    // cycles of the fp32 adder
  parameter int unsigned MulLatency = 0     // cycles of the fp32 multiplier
) (
  input  logic                                    clk_i,
  input  logic                                    rst_ni,
  input  logic                                    on_i,       // the head is in this command
  input  vacc_ctrl_t                              ctrl_i,
  input  logic [16*ComputeLanes-1:0]              kv_chunk_i,  // the V chunk
  input  logic [31:0]                             p_i,        // the weight of its row
  input  logic [31:0]                             alpha_i,    // the rescale of the rows before
  // result beat rd_beat_i of the unnormalised output row: lanes 16 * (rd_beat_i % 2) and on of
  // its beat rd_beat_i / 2
  input  logic [2:0]        rd_beat_i,
  output logic [BEAT_W-1:0] o_beat_o,
  output logic [31:0]       l_o         // softmax denominator
);
  if (HeadDim != 64 && HeadDim != 128) begin : gen_check_head_dim
    $error("nelssa_attn_vacc: HeadDim must be 64 or 128");
  end
  if (AddLatency > 15 || MulLatency > 15) begin : gen_check_latency
    $error("nelssa_attn_vacc: every unit latency must be in 0..15");
  end

  if (ComputeLanes < 1 || ComputeLanes > LANES || (ComputeLanes & (ComputeLanes - 1)) != 0)
  begin : gen_check_lanes
    $error("nelssa_attn_vacc: ComputeLanes must be a power of two in 1..32");
  end

  localparam int unsigned MAX_BPR = HeadDim / LANES;                 // beats per row
  localparam int unsigned PW = (MAX_BPR > 1) ? $clog2(MAX_BPR) : 1;  // beat-in-row width
  localparam int unsigned CHUNKS = LANES / ComputeLanes;             // chunks a beat
  localparam int unsigned CW = (CHUNKS > 1) ? $clog2(CHUNKS) : 1;    // chunk index width

  localparam int unsigned OUT_LANES = BEAT_W / 32;           // fp32 per result beat
  localparam int unsigned OUT_PER_PART = LANES / OUT_LANES;  // result beats per input beat

  logic [31:0]   l_q;  // running softmax denominator
  logic [31:0]   o_row [MAX_BPR][LANES];  // the output row, gathered from the lanes
  logic [PW-1:0] rd_part;
  logic [31:0]   p_l, l_scaled, l_src, l_sum;
  logic [PW-1:0] part, vi_part, vo_part;
  logic [CW-1:0] chunk, vi_chunk, vo_chunk;
  logic          row_first, vi_row_first, vo_row_first;  // part 0, chunk 0: l's update
  logic          unused_p, unused_ctrl;
  assign part         = PW'(ctrl_i.part);
  assign vi_part      = PW'(ctrl_i.vi_part);
  assign vo_part      = PW'(ctrl_i.vo_part);
  assign chunk        = CW'(ctrl_i.chunk);
  assign vi_chunk     = CW'(ctrl_i.vi_chunk);
  assign vo_chunk     = CW'(ctrl_i.vo_chunk);
  assign row_first    = (ctrl_i.part == 2'd0) && (ctrl_i.chunk == 5'd0);
  assign vi_row_first = (vi_part == '0) && (vi_chunk == '0);
  assign vo_row_first = (vo_part == '0) && (vo_chunk == '0);
  // (the high bits at HeadDim 64 or with fewer chunks)
  assign unused_ctrl  = ^{ctrl_i.vi_part, ctrl_i.vo_part, ctrl_i.vi_chunk, ctrl_i.vo_chunk};
  assign l_o         = l_q;
  assign rd_part     = PW'(rd_beat_i / 3'(OUT_PER_PART));
  for (genvar k = 0; k < OUT_LANES; k++) begin : gen_rd
    assign o_beat_o[32*k +: 32] = o_row[rd_part][(32'(rd_beat_i) % OUT_PER_PART) * OUT_LANES + k];
  end

  nelssa_pipe #(
    .Width  (32),
    .Latency(MulLatency)
  ) u_p_l (
    .clk_i,
    .rst_ni,
    .en_i(ctrl_i.v_chunk && on_i && row_first),
    .d_i (p_i),
    .en_o(unused_p),
    .q_o (p_l)
  );
  nelssa_fp32_mul #(
    .Latency(MulLatency)
  ) u_l_scale (
    .clk_i,
    .rst_ni,
    .en_i  (ctrl_i.v_chunk && on_i && row_first && ctrl_i.first_row),
    .a_i   (l_q),
    .b_i   (alpha_i),
    .prod_o(l_scaled)
  );
  if (AddLatency > 0) begin : gen_l_fwd
    assign l_src = (ctrl_i.vo_en && vo_row_first) ? l_sum : l_q;
  end else begin : gen_l_reg
    assign l_src = l_q;
  end
  nelssa_fp32_add #(
    .Latency(AddLatency)
  ) u_l (
    .clk_i,
    .rst_ni,
    .en_i (ctrl_i.vi_en && on_i && vi_row_first),
    .a_i  (ctrl_i.vi_first ? l_scaled : l_src),
    .b_i  (p_l),
    .sum_o(l_sum)
  );

  // (no reset: every command initialises what it reads)
  always_ff @(posedge clk_i) begin
    if (ctrl_i.cmd_take) l_q <= 32'd0;
    if (ctrl_i.vo_en && on_i && vo_row_first) l_q <= l_sum;
  end

  // unit u computes lane c * ComputeLanes + u of chunk c
  for (genvar u = 0; u < ComputeLanes; u++) begin : gen_lane
    logic [MAX_BPR-1:0][CHUNKS-1:0][31:0] o_q;  // this unit's lane of each chunk of the row
    logic [31:0] o_scaled, o_pv, o_src, o_sum;

    for (genvar b = 0; b < MAX_BPR; b++) begin : gen_part
      for (genvar c = 0; c < CHUNKS; c++) begin : gen_chunk
        assign o_row[b][c * ComputeLanes + u] = o_q[b][c];
      end
    end

    nelssa_fp32_mul #(
      .Latency(MulLatency)
    ) u_o_scale (
      .clk_i,
      .rst_ni,
      .en_i  (ctrl_i.v_chunk && on_i && ctrl_i.first_row),
      .a_i   (o_q[part][chunk]),
      .b_i   (alpha_i),
      .prod_o(o_scaled)
    );
    nelssa_fp32_mul #(
      .Latency(MulLatency)
    ) u_pv (
      .clk_i,
      .rst_ni,
      .en_i  (ctrl_i.v_chunk && on_i),
      .a_i   (p_i),
      .b_i   ({kv_chunk_i[16*u +: 16], 16'h0000}),
      .prod_o(o_pv)
    );
    if (AddLatency > 0) begin : gen_o_fwd
      assign o_src = (ctrl_i.vo_en && vo_part == vi_part && vo_chunk == vi_chunk)
                   ? o_sum : o_q[vi_part][vi_chunk];
    end else begin : gen_o_reg
      assign o_src = o_q[vi_part][vi_chunk];
    end
    nelssa_fp32_add #(
      .Latency(AddLatency)
    ) u_o (
      .clk_i,
      .rst_ni,
      .en_i (ctrl_i.vi_en && on_i),
      .a_i  (ctrl_i.vi_first ? o_scaled : o_src),
      .b_i  (o_pv),
      .sum_o(o_sum)
    );

    always_ff @(posedge clk_i) begin
      if (ctrl_i.cmd_take) begin
        o_q <= '0;
      end else if (ctrl_i.vo_en && on_i) begin
        // verilator unroll_full
        for (int b = 0; b < MAX_BPR; b++) begin
          // verilator unroll_full
          for (int c = 0; c < CHUNKS; c++) begin
            if (vo_part == PW'(b) && vo_chunk == CW'(c)) o_q[b][c] <= o_sum;
          end
        end
      end
    end
  end
endmodule
