// The V accumulation of one query head of the attention engine (nelssa_attn_engine): per lane
// o = o * (first row ? alpha : 1) + p * v for every V beat, and the denominator
// l = l * (first row ? alpha : 1) + p once per row; x * 1 is x for every value they can hold.
// A V beat is taken a chunk of ComputeLanes lanes a cycle (the lanes are independent, so the
// order of each lane's operations is the one of a whole beat). A chunk's adds are issued when its
// products have come through the multipliers (ctrl_i.vi_*); the o (and l) they read is the one
// of the row before, taken from the adder's output when it appears in that very cycle (the
// engine spaces a part's beats AddLatency cycles apart).
// The output row is read a result chunk at a time (min(ComputeLanes, 16) words of result beat
// rd_beat_i, chunk rd_chunk_i: nelssa_attn_out's). Where a lane holds 16 or more of the row's
// words (narrow lanes), they are a RAM (distributed RAM on an FPGA: three asynchronous reads,
// each a copy) with a flag per word set by its first write of the command, so that the command's
// clear is the flags' (a word not yet written reads 0); otherwise flip-flops. Same values in
// every cycle either way.
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
  // chunk rd_chunk_i of result beat rd_beat_i of the unnormalised output row: its words
  // rd_beat_i * 16 + rd_chunk_i * OUT_UNITS and on (result beat b: lanes 16 * (b % 2) and on
  // of the row's beat b / 2)
  input  logic [2:0]        rd_beat_i,
  input  logic [3:0]        rd_chunk_i,
  output logic [32*((ComputeLanes < BEAT_W / 32) ? ComputeLanes : BEAT_W / 32)-1:0] o_chunk_o,
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
  // words of a result chunk (nelssa_attn_out's multipliers), and chunks a result beat
  localparam int unsigned OUT_UNITS = (ComputeLanes < OUT_LANES) ? ComputeLanes : OUT_LANES;
  localparam int unsigned OCH = OUT_LANES / OUT_UNITS;
  localparam int unsigned ENT = MAX_BPR * CHUNKS;   // the row's words a lane holds
  localparam bit RowRam = (ENT >= 16);              // ... as a RAM (see above)
  localparam int unsigned EW = $clog2(ENT);

  logic [31:0]   l_q;  // running softmax denominator
  // the output row, gathered from the lanes' flip-flops (not with RowRam: one word, unused)
  logic [31:0]   o_row [RowRam ? 1 : MAX_BPR][RowRam ? 1 : LANES];
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
  logic unused_rd_chunk;
  assign unused_rd_chunk = ^rd_chunk_i;  // (its high bits, or all of it with one chunk a beat)
  if (RowRam) begin : gen_no_row
    logic unused_row;
    assign o_row[0][0] = '0;
    assign unused_row = ^{o_row[0][0], rd_part};
  end else begin : gen_rd
    for (genvar k = 0; k < OUT_UNITS; k++) begin : gen_word
      if (OCH == 1) begin : gen_whole
        assign o_chunk_o[32*k +: 32] =
            o_row[rd_part][(32'(rd_beat_i) % OUT_PER_PART) * OUT_LANES + k];
      end else begin : gen_part
        assign o_chunk_o[32*k +: 32] =
            o_row[rd_part][(32'(rd_beat_i) % OUT_PER_PART) * OUT_LANES
                           + (32'(rd_chunk_i) % OCH) * OUT_UNITS + k];
      end
    end
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
    logic [31:0] o_scaled, o_pv, o_src, o_sum;
    logic [31:0] o_at_chunk, o_at_vi;  // this lane's word of (part, chunk), of (vi_part, vi_chunk)

    if (RowRam) begin : gen_ram
      // (no reset: a word is read only once its flag is set)
      (* no_rw_check *) logic [31:0] o_mem [ENT];  // this lane's word of each chunk of the row
      logic [ENT-1:0] o_set_q;    // ... written in this command
      logic [EW-1:0]  e_chunk, e_vi, e_vo, e_rd;
      assign e_chunk = EW'(32'(part) * CHUNKS + 32'(chunk));
      assign e_vi    = EW'(32'(vi_part) * CHUNKS + 32'(vi_chunk));
      assign e_vo    = EW'(32'(vo_part) * CHUNKS + 32'(vo_chunk));
      // the result chunk's words lie at rd_beat * 16 + rd_chunk * ComputeLanes + u: this lane's
      // entry rd_beat * (16 / ComputeLanes) + rd_chunk (RowRam: ComputeLanes <= 8)
      assign e_rd    = EW'(32'(rd_beat_i) * OCH + 32'(rd_chunk_i) % OCH);
      assign o_at_chunk = o_set_q[e_chunk] ? o_mem[e_chunk] : '0;
      assign o_at_vi    = o_set_q[e_vi] ? o_mem[e_vi] : '0;
      assign o_chunk_o[32*u +: 32] = o_set_q[e_rd] ? o_mem[e_rd] : '0;
      always_ff @(posedge clk_i) begin
        if (!ctrl_i.cmd_take && ctrl_i.vo_en && on_i) o_mem[e_vo] <= o_sum;
      end
      always_ff @(posedge clk_i or negedge rst_ni) begin
        if (!rst_ni) o_set_q <= '0;
        else if (ctrl_i.cmd_take) o_set_q <= '0;
        else if (ctrl_i.vo_en && on_i) o_set_q[e_vo] <= 1'b1;
      end
    end else begin : gen_ffs
      logic [MAX_BPR-1:0][CHUNKS-1:0][31:0] o_q;  // this unit's lane of each chunk of the row
      assign o_at_chunk = o_q[part][chunk];
      assign o_at_vi    = o_q[vi_part][vi_chunk];
      for (genvar b = 0; b < MAX_BPR; b++) begin : gen_part
        for (genvar c = 0; c < CHUNKS; c++) begin : gen_chunk
          assign o_row[b][c * ComputeLanes + u] = o_q[b][c];
        end
      end
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

    nelssa_fp32_mul #(
      .Latency(MulLatency)
    ) u_o_scale (
      .clk_i,
      .rst_ni,
      .en_i  (ctrl_i.v_chunk && on_i && ctrl_i.first_row),
      .a_i   (o_at_chunk),
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
                   ? o_sum : o_at_vi;
    end else begin : gen_o_reg
      assign o_src = o_at_vi;
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
  end
endmodule
