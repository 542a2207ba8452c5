// Finalisation and result beats of the attention engine (nelssa_attn_engine). Finalisation, one
// head issued a cycle (ctrl_i.fin_go): LSE = (m + log2 l) * ln 2 and 1/l, each written into the
// head's registers when it leaves its pipeline. Result beats (ctrl_i.out): O of head ctrl_i.head
// scaled by its 1/l (OUT_LANES products a beat, min(ComputeLanes, OUT_LANES) a cycle), then one
// beat with the LSE of every head. With combinational multipliers that take a beat in one
// cycle a beat is offered as it is computed; otherwise a beat is issued into the multipliers
// (a chunk a cycle, gathered behind them) only when the result FIFO behind them has room for it
// and everything already on its way (credits), so res_ready_i low stops the issue; out_issue_o
// says a beat's last chunk was issued (the engine steps its head and beat counters).
`include "nelssa_assert.svh"

module nelssa_attn_out
  import nelssa_engine_pkg::*;
  import nelssa_attn_pkg::*;
#(
  parameter int unsigned HeadDim      = 128,  // largest head_dim accepted: 64 or 128
  parameter int unsigned NumQHeads    = 8,    // largest GQA group (query heads), 1..8
  parameter int unsigned ComputeLanes = 32,   // lanes computed a cycle: a power of two, 1..32
  parameter int unsigned AddLatency   = 0,    // cycles of the fp32 adder
  parameter int unsigned MulLatency   = 0,    // cycles of the fp32 multiplier
  parameter int unsigned Log2Latency  = 0,    // cycles of log2
  parameter int unsigned RecipLatency = 0     // cycles of the reciprocal
) (
  input  logic              clk_i,
  input  logic              rst_ni,
  input  out_ctrl_t         ctrl_i,
  // each head's running max (log2 domain), denominator, and chunk och_o of result beat
  // ctrl_i.obeat of its unnormalised output (OUT_UNITS words: nelssa_attn_vacc's o_chunk_o)
  input  logic [31:0]       m_i [NumQHeads],
  input  logic [31:0]       l_i [NumQHeads],
  input  logic [32*((ComputeLanes < BEAT_W / 32) ? ComputeLanes : BEAT_W / 32)-1:0]
                            o_chunk_i [NumQHeads],
  output logic [3:0]        och_o,     // the result beat's chunk issued (0 with one a beat)
  output logic              out_issue_o,
  // result beats
  output logic              res_valid_o,
  input  logic              res_ready_i,
  output logic [BEAT_W-1:0] res_data_o,
  output logic              res_last_o
);
  if (HeadDim != 64 && HeadDim != 128) begin : gen_check_head_dim
    $error("nelssa_attn_out: HeadDim must be 64 or 128");
  end
  if (NumQHeads < 1 || NumQHeads > 8) begin : gen_check_qheads
    $error("nelssa_attn_out: NumQHeads must be in 1..8");
  end
  if (AddLatency > 15 || MulLatency > 15 || Log2Latency > 15 || RecipLatency > 15)
  begin : gen_check_latency
    $error("nelssa_attn_out: every unit latency must be in 0..15");
  end

  localparam int unsigned HW = (NumQHeads > 1) ? $clog2(NumQHeads) : 1;  // head index width
  if (ComputeLanes < 1 || ComputeLanes > LANES || (ComputeLanes & (ComputeLanes - 1)) != 0)
  begin : gen_check_lanes
    $error("nelssa_attn_out: ComputeLanes must be a power of two in 1..32");
  end

  localparam int unsigned OUT_LANES = BEAT_W / 32;                       // fp32 per result beat
  // output multipliers, and the cycles (chunks) a result beat takes through them
  localparam int unsigned OUT_UNITS = (ComputeLanes < OUT_LANES) ? ComputeLanes : OUT_LANES;
  localparam int unsigned OCH = OUT_LANES / OUT_UNITS;
  localparam int unsigned OCW = (OCH > 1) ? $clog2(OCH) : 1;             // chunk index width

  logic [31:0]   lse_q [NumQHeads];
  logic [31:0]   inv_q [NumQHeads];  // 1/l
  logic [HW-1:0] out_head;           // head being finalised or output
  logic          out_offer, out_beat, unused_obeat;
  assign unused_obeat = ^ctrl_i.obeat;  // (the heads' stages select the beat; read by ResHeld)
  assign out_head = HW'(ctrl_i.head);
  assign out_beat = out_offer && (ctrl_i.head != ctrl_i.nq);  // an O beat (not the LSE beat)

  // ---------------------------------------------------------------------------------------------
  // Finalisation (lse_at, inv_at: which head leaves the pipeline)
  logic [31:0]   l_log2, lse_log2, lse_val, out_inv;
  logic          lse_en, inv_en, fin_add_en, fin_mul_en;
  logic [HW-1:0] lse_at, inv_at, fin_add_at, fin_mul_at;

  nelssa_fp32_log2 #(
    .Latency(Log2Latency)
  ) u_lse_log2 (
    .clk_i,
    .rst_ni,
    .en_i(ctrl_i.fin_go),
    .x_i (l_i[out_head]),
    .y_o (l_log2)
  );
  nelssa_pipe #(
    .Width  (HW),
    .Latency(Log2Latency)
  ) u_fin_add_at (
    .clk_i,
    .rst_ni,
    .en_i(ctrl_i.fin_go),
    .d_i (out_head),
    .en_o(fin_add_en),
    .q_o (fin_add_at)
  );
  nelssa_fp32_add #(
    .Latency(AddLatency)
  ) u_lse_add (
    .clk_i,
    .rst_ni,
    .en_i (fin_add_en),
    .a_i  (m_i[fin_add_at]),
    .b_i  (l_log2),
    .sum_o(lse_log2)
  );
  nelssa_pipe #(
    .Width  (HW),
    .Latency(AddLatency)
  ) u_fin_mul_at (
    .clk_i,
    .rst_ni,
    .en_i(fin_add_en),
    .d_i (fin_add_at),
    .en_o(fin_mul_en),
    .q_o (fin_mul_at)
  );
  nelssa_fp32_mul #(
    .Latency(MulLatency)
  ) u_lse_ln (
    .clk_i,
    .rst_ni,
    .en_i  (fin_mul_en),
    .a_i   (lse_log2),
    .b_i   (FP32_LN2),
    .prod_o(lse_val)
  );
  nelssa_pipe #(
    .Width  (HW),
    .Latency(MulLatency)
  ) u_lse_at (
    .clk_i,
    .rst_ni,
    .en_i(fin_mul_en),
    .d_i (fin_mul_at),
    .en_o(lse_en),
    .q_o (lse_at)
  );
  nelssa_fp32_recip #(
    .Latency(RecipLatency)
  ) u_inv (
    .clk_i,
    .rst_ni,
    .en_i(ctrl_i.fin_go),
    .x_i (l_i[out_head]),
    .y_o (out_inv)
  );
  nelssa_pipe #(
    .Width  (HW),
    .Latency(RecipLatency)
  ) u_inv_at (
    .clk_i,
    .rst_ni,
    .en_i(ctrl_i.fin_go),
    .d_i (out_head),
    .en_o(inv_en),
    .q_o (inv_at)
  );

  // each head's registers, at constant indices (no reset: every command writes them before
  // they are read)
  always_ff @(posedge clk_i) begin
    // verilator unroll_full
    for (int h = 0; h < NumQHeads; h++) begin
      if (lse_en && lse_at == HW'(h)) lse_q[h] <= lse_val;
      if (inv_en && inv_at == HW'(h)) inv_q[h] <= out_inv;
    end
  end

  // ---------------------------------------------------------------------------------------------
  // Result beats
  logic [31:0]       out_val [OUT_UNITS];
  logic [BEAT_W-1:0] lse_beat;
  logic [32*OUT_UNITS-1:0] o_chunk;
  logic [OCW-1:0]    och;  // the output chunk issued
  assign o_chunk = o_chunk_i[out_head];
  assign och_o = 4'(och);

  for (genvar k = 0; k < OUT_UNITS; k++) begin : gen_out
    logic [31:0] a;
    assign a = o_chunk[32*k +: 32];
    nelssa_fp32_mul #(
      .Latency(MulLatency)
    ) u_out (
      .clk_i,
      .rst_ni,
      .en_i  (out_beat),
      .a_i   (a),
      .b_i   (inv_q[out_head]),
      .prod_o(out_val[k])
    );
  end

  always_comb begin
    lse_beat = '0;
    // verilator unroll_full
    for (int h = 0; h < NumQHeads; h++) begin
      if (h < 32'(ctrl_i.nq)) lse_beat[32*h +: 32] = lse_q[h];
    end
  end

  if (MulLatency == 0 && OCH == 1) begin : gen_res_direct
    logic [BEAT_W-1:0] out_data;
    always_comb begin
      out_data = '0;
      // verilator unroll_full
      for (int k = 0; k < OUT_LANES; k++) out_data[32*k +: 32] = out_val[k];
    end
    logic unused_och;
    assign och         = '0;
    assign unused_och  = ^och;
    assign out_issue_o = ctrl_i.out && res_ready_i;
    // the beat is computed while it is offered, taken or not: its multipliers' enable must not
    // read res_ready_i, or a gated simulation's result data would depend on the ready that a
    // consumer may derive from it (a combinational loop in the FPGA top's memory port)
    assign out_offer   = ctrl_i.out;
    assign res_valid_o = ctrl_i.out;
    assign res_last_o  = res_valid_o && (ctrl_i.head == ctrl_i.nq);
    assign res_data_o  = !res_valid_o ? '0 : (ctrl_i.head == ctrl_i.nq) ? lse_beat : out_data;

    // a result beat not taken stays, the same beat (its head and beat index, which select its
    // data from registers that hold still while beats are due: cheaper than keeping the 512
    // data bits)
    `NELSSA_ASSERT_HOLD(ResHeld, res_valid_o, res_ready_i,
                        {ctrl_i.head, ctrl_i.obeat, res_last_o})
  end else begin : gen_res_fifo
    localparam int unsigned Depth = MulLatency + 2;  // full rate: MulLatency on the way, 1 out
    localparam int unsigned AW = $clog2(Depth);
    localparam int unsigned NW = $clog2(Depth + 1);
    localparam int unsigned CB = 32 * OUT_UNITS;     // bits of a chunk

    logic [Depth-1:0][BEAT_W:0] mem_q;  // {last, data}
    logic [AW-1:0] rd_q, wr_q;
    logic [NW-1:0] cnt_q, fly_q;        // beats held, beats in the multipliers
    logic          issued_last_q, push, push_last, res_fire, lse_now;
    logic          start, issue, chunk_end, push_end;
    logic [OCW-1:0] push_och;
    logic [BEAT_W-1:0] push_data;  // the beat's earlier chunks gathered, its last one arriving

    assign res_fire  = res_valid_o && res_ready_i;
    assign lse_now   = (ctrl_i.head == ctrl_i.nq);
    // (from registers only: no path from res_ready_i) a beat starts when its credits allow;
    // its other chunks follow in the next cycles
    if (OCH == 1) begin : gen_one_chunk
      logic unused_och;
      assign och = '0;
      assign unused_och = ^och;
      assign start = ctrl_i.out && !issued_last_q && (32'(cnt_q) + 32'(fly_q) < Depth);
      assign issue = start;
      assign chunk_end = 1'b1;
    end else begin : gen_chunks
      logic [OCW-1:0] och_q;
      assign och = och_q;
      assign start = ctrl_i.out && !issued_last_q && och_q == '0 &&
                     (32'(cnt_q) + 32'(fly_q) < Depth);
      assign issue = start || (och_q != '0);
      assign chunk_end = lse_now || (32'(och_q) == OCH - 1);
      always_ff @(posedge clk_i or negedge rst_ni) begin
        if (!rst_ni) och_q <= '0;
        else if (issue) och_q <= chunk_end ? '0 : och_q + OCW'(1);
      end
    end
    assign out_issue_o = issue && chunk_end;
    assign out_offer   = issue;
    nelssa_pipe #(
      .Width  (2 + OCW),
      .Latency(MulLatency)
    ) u_res_pos (
      .clk_i,
      .rst_ni,
      .en_i(issue),
      .d_i ({lse_now, chunk_end, och}),
      .en_o(push),
      .q_o ({push_last, push_end, push_och})
    );

    if (OCH == 1) begin : gen_no_gather
      logic unused_push;
      assign unused_push = ^{push_end, push_och};
      always_comb begin
        push_data = '0;
        // verilator unroll_full
        for (int k = 0; k < OUT_UNITS; k++) push_data[32*k +: 32] = out_val[k];
      end
    end else begin : gen_gather
      logic [BEAT_W-CB-1:0] gather_q;  // the chunks before the last (no reset: written first)
      logic [CB-1:0] last_chunk;
      always_comb begin
        last_chunk = '0;
        // verilator unroll_full
        for (int k = 0; k < OUT_UNITS; k++) last_chunk[32*k +: 32] = out_val[k];
      end
      // chunk c lies at bits CB * c
      assign push_data = {last_chunk, gather_q};
      always_ff @(posedge clk_i) begin
        if (push && !push_end) begin
          // verilator unroll_full
          for (int c = 0; c < OCH - 1; c++) begin
            if (push_och == OCW'(c)) gather_q[CB * c +: CB] <= last_chunk;
          end
        end
      end
    end

    assign res_valid_o = (cnt_q != '0);
    assign res_last_o  = res_valid_o && mem_q[rd_q][BEAT_W];
    assign res_data_o  = res_valid_o ? mem_q[rd_q][BEAT_W-1:0] : '0;

    always_ff @(posedge clk_i) begin
      if (push && push_end) mem_q[wr_q] <= {push_last, push_last ? lse_beat : push_data};
    end
    always_ff @(posedge clk_i or negedge rst_ni) begin
      if (!rst_ni) begin
        rd_q          <= '0;
        wr_q          <= '0;
        cnt_q         <= '0;
        fly_q         <= '0;
        issued_last_q <= 1'b0;
      end else begin
        if (push && push_end) wr_q <= (32'(wr_q) == Depth - 1) ? '0 : wr_q + AW'(1);
        if (res_fire) rd_q <= (32'(rd_q) == Depth - 1) ? '0 : rd_q + AW'(1);
        cnt_q <= cnt_q + NW'(push && push_end) - NW'(res_fire);
        fly_q <= fly_q + NW'(start) - NW'(push && push_end);
        if (!ctrl_i.out) issued_last_q <= 1'b0;
        else if (out_issue_o && lse_now) issued_last_q <= 1'b1;
      end
    end

    // the FIFO never takes a beat it has no room for, and a beat not taken stays the same
    `NELSSA_ASSERT_NEVER(ResFifoOverflow, push && push_end && !res_fire && 32'(cnt_q) == Depth)
    `NELSSA_ASSERT_HOLD(ResHeld, res_valid_o, res_ready_i, {rd_q, res_last_o})
  end
endmodule
