// Sparse-attention engine of one PNM device: the query heads of one KV head (a GQA group)
// against the selected clusters of that KV head, with online softmax over clusters.
//
// Stream (kv_*): Q rows of every query head, then for each cluster its K rows then its V rows;
// 64-byte beats, lane i (bf16) in bits [16i+15:16i], head_dim/32 beats per row, kv_last_i on
// the final beat. Cluster lengths arrive on clu_* (one entry per cluster, in order); the entry
// of the next cluster is taken early, during the current one.
// Result (res_*): for each query head head_dim/16 beats of normalised O (fp32, lane k in bits
// [32k+31:32k]), then one beat with LSE (fp32, natural log) of head h in bits [32h+31:32h].
// done_o pulses once per command with status_o (nelssa_engine_pkg::status_e).
// A command rejected at acceptance (bad head_dim or query heads, zero clusters) consumes nothing
// from clu_* or kv_*: its producer must not offer a stream for it. Any other error drains both
// channels (the command's cluster entries, the stream up to kv_last_i) before done_o.
//
// The order of floating-point operations is the contract with hw/model/engine.py; see
// docs/numerics.md. Lanes: the datapath computes ComputeLanes of a beat's 32 lanes a cycle (a
// chunk), so a K or V beat takes 32 / ComputeLanes cycles (chunk 0 in the cycle it is taken,
// the others from a register) and a result beat 16 / min(ComputeLanes, 16); the dot products'
// tree and every lane's operations are the same ones in the same order at every lane count.
// Throughput, with every unit combinational (all latencies 0) and all 32 lanes: one beat per
// cycle inside a K or V phase; each cluster costs two stall cycles at its K->V turn (last
// score, softmax set-up); the first cluster one more. With pipelined units (the *Latency
// parameters) the same operations in the same order take longer: the K->V turn waits for the
// last score and the set-up through their pipelines, a V row takes max(beats per row,
// AddLatency) cycles (o and l are loop-carried once per row), and finalisation and output pay
// their units' latencies. hw/model/engine_cycles.py gives every phase's cycles.
//
// This module is the control (the state machine, the counters, the handshakes) and the
// positions that travel beside the datapath's pipelines; the datapath is in its stages, fed by
// packed buses (nelssa_attn_pkg): per query head nelssa_attn_kscore (Q row, dot products, fold,
// score), nelssa_attn_softmax (running max, the cluster's scores then weights, alpha) and
// nelssa_attn_vacc (o and l); for all heads nelssa_attn_out (LSE, 1/l, result beats).
`include "nelssa_assert.svh"

module nelssa_attn_engine
  import nelssa_engine_pkg::*;
  import nelssa_attn_pkg::*;
#(
  parameter int unsigned HeadDim          = 128,  // largest head_dim accepted: 64 or 128
  parameter int unsigned NumQHeads        = 8,    // largest GQA group (query heads), 1..8
  parameter int unsigned MaxClusterTokens = 64,   // score-buffer depth in tokens, 1..255
  // Lanes of a beat the datapath computes a cycle: a power of two, 1..32 (32: a beat a cycle);
  // the dot products' multipliers and the V, o, l and output lanes are that many units. The
  // PNM device preset's compute_lanes (emu/latency/hardware.py) holds it
  parameter int unsigned ComputeLanes     = 32,
  // Cycles from an arithmetic unit's inputs to its result (0: combinational), 0..15 each; the
  // PNM device preset's fp_latency (emu/latency/hardware.py) holds them
  parameter int unsigned Bf16MulLatency   = 0,    // bf16 x bf16 multiplier
  parameter int unsigned AddLatency       = 0,    // fp32 adder
  parameter int unsigned MulLatency       = 0,    // fp32 multiplier
  parameter int unsigned Exp2Latency      = 0,    // exp2
  parameter int unsigned Log2Latency      = 0,    // log2
  parameter int unsigned RecipLatency     = 0     // reciprocal
) (
  input  logic              clk_i,
  input  logic              rst_ni,
  // command
  input  logic              cmd_valid_i,
  output logic              cmd_ready_o,
  input  logic [7:0]        cmd_head_dim_i,      // 64 or 128
  input  logic [3:0]        cmd_num_qheads_i,    // 1..NumQHeads
  input  logic [15:0]       cmd_num_clusters_i,  // >= 1
  input  logic [31:0]       cmd_scale_i,         // fp32 softmax scale, e.g. 1/sqrt(head_dim)
  // cluster lengths, one per cluster
  input  logic              clu_valid_i,
  output logic              clu_ready_o,
  input  logic [7:0]        clu_tokens_i,
  // data beats
  input  logic              kv_valid_i,
  output logic              kv_ready_o,
  input  logic [BEAT_W-1:0] kv_data_i,
  input  logic              kv_last_i,
  // result beats
  output logic              res_valid_o,
  input  logic              res_ready_i,
  output logic [BEAT_W-1:0] res_data_o,
  output logic              res_last_o,
  // completion
  output logic              done_o,
  output status_e           status_o,
  output logic              busy_o
);
  // ---------------------------------------------------------------------------------------------
  // Parameter checks
  if (HeadDim != 64 && HeadDim != 128) begin : gen_check_head_dim
    $error("nelssa_attn_engine: HeadDim must be 64 or 128");
  end
  if (NumQHeads < 1 || NumQHeads > 8) begin : gen_check_qheads
    $error("nelssa_attn_engine: NumQHeads must be in 1..8");
  end
  if (MaxClusterTokens < 1 || MaxClusterTokens > 255) begin : gen_check_tokens
    $error("nelssa_attn_engine: MaxClusterTokens must be in 1..255");
  end
  if (ComputeLanes < 1 || ComputeLanes > LANES || (ComputeLanes & (ComputeLanes - 1)) != 0)
  begin : gen_check_lanes
    $error("nelssa_attn_engine: ComputeLanes must be a power of two in 1..32");
  end
  if (Bf16MulLatency > 15 || AddLatency > 15 || MulLatency > 15 || Exp2Latency > 15 ||
      Log2Latency > 15 || RecipLatency > 15) begin : gen_check_latency
    $error("nelssa_attn_engine: every unit latency must be in 0..15");
  end

  localparam int unsigned HW = (NumQHeads > 1) ? $clog2(NumQHeads) : 1;  // head index width
  localparam int unsigned MAX_BPR = HeadDim / LANES;                     // beats per row
  localparam int unsigned PW = (MAX_BPR > 1) ? $clog2(MAX_BPR) : 1;      // beat-in-row width
  localparam int unsigned CHUNKS = LANES / ComputeLanes;  // cycles a K or V beat takes
  localparam int unsigned CHW = (CHUNKS > 1) ? $clog2(CHUNKS) : 1;  // chunk index width
  localparam int unsigned CB = 16 * ComputeLanes;         // bits of a chunk

  // Pipeline depths (hw/model/engine_cycles.py computes the same)
  localparam int unsigned DOT_LAT   = Bf16MulLatency + $clog2(LANES) * AddLatency;  // beat sum
  localparam int unsigned FOLD_LAT  = (MAX_BPR - 1) * AddLatency;  // a row's beat sums folded
  localparam int unsigned WEIGHT_LAT = AddLatency + Exp2Latency;   // exp2(t - m)
  localparam int unsigned V_LAT     = MulLatency + AddLatency;     // a V beat into o and l
  localparam int unsigned LSE_LAT   = Log2Latency + AddLatency + MulLatency;
  // cycles after the last K beat is taken until the last score is written (its other chunks
  // first); set-up; after the last V beat is taken until o and l are written; after the last
  // finalisation issue
  localparam int unsigned KDRAIN_CYC = (CHUNKS - 1) + 1 + DOT_LAT + FOLD_LAT + MulLatency;
  localparam int unsigned SETUP_CYC  = WEIGHT_LAT + 1;
  localparam int unsigned VDRAIN_CYC = (CHUNKS - 1) + V_LAT;
  localparam int unsigned FWAIT_CYC  = (LSE_LAT > RecipLatency) ? LSE_LAT : RecipLatency;
  // an error's drain waits until nothing of the command is left in a chunk or a pipeline
  localparam int unsigned FLUSH_CYC  = (CHUNKS - 1) + DOT_LAT + FOLD_LAT + MulLatency +
                                       WEIGHT_LAT + V_LAT;
  localparam int unsigned CW = 10;  // width of the wait counters

  typedef enum logic [3:0] {
    StIdle, StQ, StClu, StK, StKDrain, StSetup, StV, StVDrain, StFinal, StFinWait, StOut,
    StDrain, StDone
  } state_e;

  // ---------------------------------------------------------------------------------------------
  // Control registers
  state_e      state_q, state_d;
  status_e     status_q, status_d;
  logic [2:0]  bpr_q, bpr_d;                // beats per row: 2 or 4
  logic [3:0]  nq_q, nq_d;                  // query heads of this command
  logic [15:0] nclu_q, nclu_d;              // clusters of this command
  logic [15:0] clu_popped_q, clu_popped_d;  // cluster entries consumed so far
  logic [7:0]  ntok_q, ntok_d;              // tokens of the current cluster
  logic [7:0]  tok_q, tok_d;                // token within the cluster (K or V phase)
  logic [1:0]  part_q, part_d;              // beat within the row
  logic [3:0]  head_q, head_d;              // query head (Q load, finalisation, output)
  logic [2:0]  obeat_q, obeat_d;            // result beat within a head
  logic        last_seen_q, last_seen_d;    // kv_last_i consumed (drain)
  logic [CW-1:0] wait_q, wait_d;            // cycles left in a waiting state, less one
  logic [CW-1:0] flush_q, flush_d;          // cycles left until the pipelines are empty
  logic [31:0] c_q;            // scale * log2(e)
  logic        c_ready_q;      // c_q holds this command's c

  // Datapath state. Each query head's registers are in its stages (gen_head), written at
  // constant indices, so synthesis maps them to flip-flops; what the finalisation and the
  // result beats read by head is gathered here.
  // the chunk out_och of result beat obeat_q of the unnormalised output
  logic [32*((ComputeLanes < BEAT_W / 32) ? ComputeLanes : BEAT_W / 32)-1:0] o_chunk [NumQHeads];
  logic [3:0] out_och;
  logic [31:0] m_head [NumQHeads];                  // running max (log2 domain)
  logic [31:0] l_head [NumQHeads];                  // running softmax denominator

  // Cluster entry taken ahead of time
  logic              next_valid_q, next_valid_d;
  logic [7:0]        next_ntok_q, next_ntok_d;

  // ---------------------------------------------------------------------------------------------
  // Handshakes and positions
  logic kv_fire, clu_fire, res_fire;
  logic v_room;  // a V beat may be taken (the V spacing, below)
  logic row_end, cluster_end, all_popped, final_cluster, prefetch, clu_take, clu_bad;
  logic [7:0] clu_len;

  assign kv_fire       = kv_valid_i && kv_ready_o;
  assign clu_fire      = clu_valid_i && clu_ready_o;
  assign res_fire      = res_valid_o && res_ready_i;
  assign row_end       = (part_q == 2'(bpr_q - 3'd1));
  assign cluster_end   = row_end && (tok_q == ntok_q - 8'd1);
  assign all_popped    = (clu_popped_q == nclu_q);
  assign final_cluster = all_popped && !next_valid_q;  // the current cluster is the last
  // take the next cluster's entry while the current one streams
  assign prefetch      = (state_q == StK || state_q == StKDrain || state_q == StSetup ||
                          state_q == StV) && !next_valid_q && !all_popped;
  // the entry that starts the next cluster: held early, or arriving now in StClu
  assign clu_take      = next_valid_q || clu_fire;
  assign clu_len       = next_valid_q ? next_ntok_q : clu_tokens_i;
  assign clu_bad       = (clu_len == 8'd0) || (32'(clu_len) > MaxClusterTokens);

  // ---------------------------------------------------------------------------------------------
  // Command decode
  logic cmd_hd_ok, cmd_nq_ok;

  assign cmd_hd_ok = (cmd_head_dim_i == 8'd64) || (cmd_head_dim_i == 8'd128 && HeadDim == 128);
  assign cmd_nq_ok = (cmd_num_qheads_i != 4'd0) && (32'(cmd_num_qheads_i) <= NumQHeads);

  // ---------------------------------------------------------------------------------------------
  // Arithmetic. Every floating-point operation is an instance of a unit (rtl/core), 1,381 at
  // HeadDim 128 and 8 heads, so synthesis maps each kind of unit once. A unit's en_i is
  // exactly the condition under which its result is used (Latency cycles later, by a register
  // or a later unit; the enable travels with it): a simulation built with NELSSA_FP_GATED
  // computes only the active phase's units, and the engine's tests also run without it, which
  // shows no other unit output is ever read.
  logic cmd_take, k_beat, v_beat, setup, setup_go, out_issue, fin_go;
  assign cmd_take = (state_q == StIdle) && cmd_valid_i;
  assign k_beat   = (state_q == StK) && kv_fire;
  assign v_beat   = (state_q == StV) && kv_fire;

  // The chunks of a K or V beat: chunk 0 from kv_data_i in the cycle the beat is taken, then
  // one a cycle from the beat's register (ch_busy_q; the next beat waits), beside the beat's
  // position in the row and the cluster, captured as it was taken
  logic           ch_busy_q;  // chunks ch_q.. of the beat taken before are being issued
  logic           ch_v_q;     // ... of a V beat
  logic [CHW-1:0] ch_q;
  logic [1:0]     ch_part_q;
  logic [7:0]     ch_tok_q;
  logic           ch_row_end_q;
  logic [CHW-1:0] chunk;      // the chunk issued now (if any)
  logic [CB-1:0]  kv_chunk;   // ... its lanes
  logic           chunk_last;
  if (CHUNKS == 1) begin : gen_whole_beat
    assign ch_busy_q    = 1'b0;
    assign ch_v_q       = 1'b0;
    assign ch_q         = '0;
    assign ch_part_q    = 2'd0;
    assign ch_tok_q     = 8'd0;
    assign ch_row_end_q = 1'b0;
    assign kv_chunk     = kv_data_i;
  end else begin : gen_chunks
    logic [BEAT_W-1:CB] beat_q;  // the beat's chunks after the first (no reset: written first)
    assign kv_chunk = ch_busy_q ? beat_q[32'(ch_q) * CB +: CB] : kv_data_i[CB-1:0];
    always_ff @(posedge clk_i or negedge rst_ni) begin
      if (!rst_ni) begin
        ch_busy_q <= 1'b0;
        ch_q      <= '0;
      end else if (k_beat || v_beat) begin
        ch_busy_q <= 1'b1;
        ch_q      <= CHW'(1);
      end else if (ch_busy_q) begin
        ch_busy_q <= (32'(ch_q) != CHUNKS - 1);
        ch_q      <= ch_q + CHW'(1);
      end
    end
    always_ff @(posedge clk_i) begin
      if (k_beat || v_beat) begin
        beat_q       <= kv_data_i[BEAT_W-1:CB];
        ch_v_q       <= v_beat;
        ch_part_q    <= part_q;
        ch_tok_q     <= tok_q;
        ch_row_end_q <= row_end;
      end
    end
  end
  assign chunk      = ch_busy_q ? ch_q : '0;
  assign chunk_last = (32'(chunk) == CHUNKS - 1);
  assign setup    = (state_q == StSetup);
  assign setup_go = setup && (wait_q == CW'(SETUP_CYC - 1));  // the set-up's first cycle
  assign fin_go   = (state_q == StFinal);

  // the softmax scale in the log2 domain, c = scale * log2(e)
  logic [31:0] c_d;
  logic        c_load, unused_c;
  nelssa_fp32_mul #(
    .Latency(MulLatency)
  ) u_scale (
    .clk_i,
    .rst_ni,
    .en_i  (cmd_take),
    .a_i   (cmd_scale_i),
    .b_i   (FP32_LOG2E),
    .prod_o(c_d)
  );
  nelssa_pipe #(
    .Width  (1),
    .Latency(MulLatency)
  ) u_c_load (
    .clk_i,
    .rst_ni,
    .en_i(cmd_take),
    .d_i (1'b0),
    .en_o(c_load),
    .q_o (unused_c)
  );

  // The positions that travel beside the datapath's pipelines, from the phase events here
  phase_t        phase;
  kscore_ctrl_t  kscore_ctrl;
  softmax_ctrl_t softmax_ctrl;
  vacc_ctrl_t    vacc_ctrl;
  out_ctrl_t     out_ctrl;

  assign phase = '{
    cmd_take:   cmd_take,
    k_chunk:    k_beat || (ch_busy_q && !ch_v_q),
    v_chunk:    v_beat || (ch_busy_q && ch_v_q),
    chunk:      5'(chunk),
    last_chunk: chunk_last,
    part:       ch_busy_q ? ch_part_q : part_q,
    row_end:    ch_busy_q ? ch_row_end_q : row_end,
    tok:        ch_busy_q ? ch_tok_q : tok_q,
    ntok:       ntok_q,
    bpr:        bpr_q,
    setup:      setup,
    setup_go:   setup_go,
    weights_on: (state_q == StSetup || state_q == StV)
  };
  nelssa_attn_pos #(
    .HeadDim         (HeadDim),
    .MaxClusterTokens(MaxClusterTokens),
    .ComputeLanes    (ComputeLanes),
    .AddLatency      (AddLatency),
    .MulLatency      (MulLatency),
    .DotLatency      (DOT_LAT),
    .WeightLatency   (WEIGHT_LAT)
  ) u_pos (
    .clk_i,
    .rst_ni,
    .phase_i  (phase),
    .kscore_o (kscore_ctrl),
    .softmax_o(softmax_ctrl),
    .vacc_o   (vacc_ctrl)
  );

  // The datapath stages: per query head its K stage (Q row, dot products, fold, score), its
  // softmax state (running max, scores then weights, alpha) and its V accumulation (o and l);
  // then the finalisation and the result beats of all heads
  assign out_ctrl = '{
    fin_go: fin_go,
    out:    (state_q == StOut),
    head:   head_q,
    nq:     nq_q,
    obeat:  obeat_q
  };

  for (genvar h = 0; h < NumQHeads; h++) begin : gen_head
    logic        on;  // the head is in this command
    logic [31:0] score, p, alpha;
    assign on = (4'(h) < nq_q);

    nelssa_attn_kscore #(
      .HeadDim       (HeadDim),
      .ComputeLanes  (ComputeLanes),
      .Bf16MulLatency(Bf16MulLatency),
      .AddLatency    (AddLatency),
      .MulLatency    (MulLatency)
    ) u_kscore (
      .clk_i,
      .rst_ni,
      .on_i      (on),
      .q_load_i  ((state_q == StQ) && kv_fire && HW'(head_q) == HW'(h)),
      .ctrl_i    (kscore_ctrl),
      .kv_data_i,
      .kv_chunk_i(kv_chunk),
      .c_i       (c_q),
      .score_o   (score)
    );
    nelssa_attn_softmax #(
      .MaxClusterTokens(MaxClusterTokens),
      .AddLatency      (AddLatency),
      .Exp2Latency     (Exp2Latency)
    ) u_softmax (
      .clk_i,
      .rst_ni,
      .on_i   (on),
      .ctrl_i (softmax_ctrl),
      .score_i(score),
      .p_o    (p),
      .alpha_o(alpha),
      .m_o    (m_head[h])
    );
    nelssa_attn_vacc #(
      .HeadDim     (HeadDim),
      .ComputeLanes(ComputeLanes),
      .AddLatency  (AddLatency),
      .MulLatency  (MulLatency)
    ) u_vacc (
      .clk_i,
      .rst_ni,
      .on_i      (on),
      .ctrl_i    (vacc_ctrl),
      .kv_chunk_i(kv_chunk),
      .p_i       (p),
      .alpha_i   (alpha),
      .rd_beat_i (obeat_q),
      .rd_chunk_i(out_och),
      .o_chunk_o (o_chunk[h]),
      .l_o       (l_head[h])
    );
  end

  nelssa_attn_out #(
    .HeadDim     (HeadDim),
    .NumQHeads   (NumQHeads),
    .ComputeLanes(ComputeLanes),
    .AddLatency  (AddLatency),
    .MulLatency  (MulLatency),
    .Log2Latency (Log2Latency),
    .RecipLatency(RecipLatency)
  ) u_out (
    .clk_i,
    .rst_ni,
    .ctrl_i     (out_ctrl),
    .m_i        (m_head),
    .l_i        (l_head),
    .o_chunk_i  (o_chunk),
    .och_o      (out_och),
    .out_issue_o(out_issue),
    .res_valid_o,
    .res_ready_i,
    .res_data_o,
    .res_last_o
  );

  // ---------------------------------------------------------------------------------------------
  // Control: handshakes and the state machine
  always_comb begin
    cmd_ready_o = (state_q == StIdle);
    clu_ready_o = (state_q == StClu && !next_valid_q) || prefetch ||
                  (state_q == StDrain && !all_popped);
    unique case (state_q)
      StQ:      kv_ready_o = 1'b1;
      StK:      kv_ready_o = !ch_busy_q;
      StV:      kv_ready_o = v_room && !ch_busy_q;
      StDrain:  kv_ready_o = !last_seen_q;
      default:  kv_ready_o = 1'b0;
    endcase
  end

  // (a block of its own: the next state reads the handshakes above through kv_fire and
  // clu_take, and one block writing both reads to yosys-slang as a loop through its muxes,
  // which synthesis kept into the netlist)
  always_comb begin
    state_d  = state_q;
    status_d = status_q;
    unique case (state_q)
      StIdle: begin
        if (cmd_valid_i) begin
          status_d = STATUS_OK;
          state_d  = StQ;
          if (!cmd_hd_ok) begin
            status_d = STATUS_ERR_BAD_HEAD_DIM;
            state_d  = StDone;
          end else if (!cmd_nq_ok) begin
            status_d = STATUS_ERR_BAD_QHEADS;
            state_d  = StDone;
          end else if (cmd_num_clusters_i == 16'd0) begin
            status_d = STATUS_ERR_NO_CLUSTERS;
            state_d  = StDone;
          end
        end
      end
      StQ: begin
        if (kv_fire) begin
          if (kv_last_i) begin
            status_d = STATUS_ERR_SHORT_STREAM;
            state_d  = StDrain;
          end else if (row_end && head_q == nq_q - 4'd1) begin
            state_d = StClu;
          end
        end
      end
      StClu: begin
        if (clu_take) begin
          if (clu_bad) begin
            status_d = STATUS_ERR_BAD_CLUSTER_LEN;
            state_d  = StDrain;
          end else begin
            state_d = StK;
          end
        end
      end
      StK: begin
        if (kv_fire) begin
          if (kv_last_i) begin
            status_d = STATUS_ERR_SHORT_STREAM;
            state_d  = StDrain;
          end else if (cluster_end) begin
            state_d = StKDrain;
          end
        end
      end
      // the last score and the cluster max are written at the end of its last cycle
      StKDrain: if (wait_q == '0) state_d = StSetup;
      StSetup:  if (wait_q == '0) state_d = StV;
      StV: begin
        if (kv_fire) begin
          if (cluster_end && final_cluster) begin
            if (kv_last_i) begin
              state_d = (VDRAIN_CYC > 0) ? StVDrain : StFinal;
            end else begin
              status_d = STATUS_ERR_LONG_STREAM;
              state_d  = StDrain;
            end
          end else if (kv_last_i) begin
            status_d = STATUS_ERR_SHORT_STREAM;
            state_d  = StDrain;
          end else if (cluster_end) begin
            if (!next_valid_q) begin
              state_d = StClu;
            end else if (clu_bad) begin
              status_d = STATUS_ERR_BAD_CLUSTER_LEN;
              state_d  = StDrain;
            end else begin
              state_d = StK;
            end
          end
        end
      end
      // o and l are written at the end of its last cycle
      StVDrain: if (wait_q == '0) state_d = StFinal;
      StFinal: begin
        if (head_q == nq_q - 4'd1) state_d = (FWAIT_CYC > 0) ? StFinWait : StOut;
      end
      // the last LSE and 1/l are written at the end of its last cycle
      StFinWait: if (wait_q == '0) state_d = StOut;
      StOut: begin
        if (res_fire && res_last_o) state_d = StDone;
      end
      StDrain: begin
        if (all_popped && last_seen_q && flush_q == '0) state_d = StDone;
      end
      StDone:  state_d = StIdle;
      default: state_d = StIdle;
    endcase
  end

  // Counters and command fields
  always_comb begin
    bpr_d        = bpr_q;
    nq_d         = nq_q;
    nclu_d       = nclu_q;
    clu_popped_d = clu_fire ? clu_popped_q + 16'd1 : clu_popped_q;
    ntok_d       = ntok_q;
    tok_d        = tok_q;
    part_d       = part_q;
    head_d       = head_q;
    obeat_d      = obeat_q;
    last_seen_d  = last_seen_q || (kv_fire && kv_last_i);
    wait_d       = (wait_q == '0) ? '0 : wait_q - CW'(1);
    flush_d      = (flush_q == '0) ? '0 : flush_q - CW'(1);
    next_valid_d = next_valid_q || (clu_fire && prefetch);
    next_ntok_d  = (clu_fire && prefetch) ? clu_tokens_i : next_ntok_q;
    unique case (state_q)
      StIdle: begin
        if (cmd_valid_i) begin
          bpr_d        = (cmd_head_dim_i == 8'd128) ? 3'd4 : 3'd2;
          nq_d         = cmd_num_qheads_i;
          nclu_d       = cmd_num_clusters_i;
          clu_popped_d = 16'd0;
          last_seen_d  = 1'b0;
          part_d       = 2'd0;
          head_d       = 4'd0;
          next_valid_d = 1'b0;
        end
      end
      StQ: begin
        if (kv_fire) begin
          part_d = row_end ? 2'd0 : part_q + 2'd1;
          if (row_end) head_d = head_q + 4'd1;
        end
      end
      StClu: begin
        if (clu_take) begin
          ntok_d       = clu_len;
          next_valid_d = 1'b0;
          tok_d        = 8'd0;
          part_d       = 2'd0;
        end
      end
      StK, StV: begin
        if (kv_fire) begin
          part_d = row_end ? 2'd0 : part_q + 2'd1;
          if (row_end) tok_d = cluster_end ? 8'd0 : tok_q + 8'd1;
        end
        if (state_q == StV && state_d == StK) begin  // next cluster straight from its entry
          ntok_d       = next_ntok_q;
          next_valid_d = 1'b0;
        end
        if (state_d == StFinal || state_d == StVDrain) head_d = 4'd0;
      end
      StFinal: begin
        head_d  = (head_q == nq_q - 4'd1) ? 4'd0 : head_q + 4'd1;
        obeat_d = 3'd0;
      end
      StOut: begin
        if (out_issue) begin
          if (32'(obeat_q) == 32'(bpr_q) * 2 - 1) begin
            obeat_d = 3'd0;
            head_d  = head_q + 4'd1;
          end else begin
            obeat_d = obeat_q + 3'd1;
          end
        end
      end
      default: ;
    endcase
    // a waiting state's length, set as it is entered
    if (state_d != state_q) begin
      unique case (state_d)
        StKDrain:  wait_d = CW'(KDRAIN_CYC - 1);
        StSetup:   wait_d = CW'(SETUP_CYC - 1);
        StVDrain:  wait_d = CW'(VDRAIN_CYC - 1);
        StFinWait: wait_d = CW'(FWAIT_CYC - 1);
        StDrain:   flush_d = CW'(FLUSH_CYC);
        default: ;
      endcase
    end
  end

  // V rows in flight: a beat waits until the one of its part in the row before is AddLatency
  // cycles old, so its add finds that result in o (or at the adder's output); a row then
  // takes max(beats per row, AddLatency) cycles. Only an adder slower than the shortest row
  // (2 beats) needs the wait.
  if (AddLatency > 2) begin : gen_v_spacing
    localparam int unsigned SW = $clog2(AddLatency + 1);
    logic [PW-1:0] part;  // the V beat's part, as an index
    assign part = PW'(part_q);
    logic [MAX_BPR-1:0][SW-1:0] age_q;  // cycles since each part's last V beat, saturating

    assign v_room = (32'(age_q[part]) >= AddLatency);
    always_ff @(posedge clk_i or negedge rst_ni) begin
      if (!rst_ni) begin
        age_q <= '0;
      end else begin
        // verilator unroll_full
        for (int b = 0; b < MAX_BPR; b++) begin
          if (setup || (v_beat && part == PW'(b))) begin
            age_q[b] <= setup ? SW'(AddLatency) : SW'(1);
          end else if (32'(age_q[b]) < AddLatency) begin
            age_q[b] <= age_q[b] + SW'(1);
          end
        end
      end
    end
  end else begin : gen_v_full_rate
    assign v_room = 1'b1;
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      state_q      <= StIdle;
      status_q     <= STATUS_OK;
      bpr_q        <= 3'd4;
      nq_q         <= 4'd1;
      nclu_q       <= 16'd0;
      clu_popped_q <= 16'd0;
      ntok_q       <= 8'd0;
      tok_q        <= 8'd0;
      part_q       <= 2'd0;
      head_q       <= 4'd0;
      obeat_q      <= 3'd0;
      last_seen_q  <= 1'b0;
      wait_q       <= '0;
      flush_q      <= '0;
      next_valid_q <= 1'b0;
      next_ntok_q  <= 8'd0;
      c_ready_q    <= 1'b0;
    end else begin
      state_q      <= state_d;
      status_q     <= status_d;
      bpr_q        <= bpr_d;
      nq_q         <= nq_d;
      nclu_q       <= nclu_d;
      clu_popped_q <= clu_popped_d;
      ntok_q       <= ntok_d;
      tok_q        <= tok_d;
      part_q       <= part_d;
      head_q       <= head_d;
      obeat_q      <= obeat_d;
      last_seen_q  <= last_seen_d;
      wait_q       <= wait_d;
      flush_q      <= flush_d;
      next_valid_q <= next_valid_d;
      next_ntok_q  <= next_ntok_d;
      c_ready_q    <= c_load || (c_ready_q && !cmd_take);
    end
  end

  // ---------------------------------------------------------------------------------------------
  // The scale (no reset: every command loads it before its first score)
  always_ff @(posedge clk_i) begin
    if (c_load) c_q <= c_d;
  end

  assign done_o   = (state_q == StDone);
  assign status_o = status_q;
  assign busy_o   = (state_q != StIdle);

  // ---------------------------------------------------------------------------------------------
  // Protocol rules. A command offered stays offered, unchanged, until taken. A cluster entry or a
  // beat not taken may be withdrawn (the engine takes what is offered when it is ready: the
  // testbenches' gaps do so), but one still offered in the next cycle is the same one.
  `NELSSA_ASSERT_HOLD(CmdHeld, cmd_valid_i, cmd_ready_o,
                      {cmd_head_dim_i, cmd_num_qheads_i, cmd_num_clusters_i, cmd_scale_i})
  `NELSSA_ASSERT(CluKeptStable, !(clu_valid_i && $past(clu_valid_i && !clu_ready_o)) ||
                                $stable(clu_tokens_i))
  // (a beat's first four lanes stand for it: keeping all 512 bits of the last cycle cost the
  // device's simulation about a percent, four engines each cycle)
  `NELSSA_ASSERT(KvKeptStable, !(kv_valid_i && $past(kv_valid_i && !kv_ready_o)) ||
                               $stable({kv_data_i[63:0], kv_last_i}))
  // The engine's own, which no input can break (checked in every run; those of the result
  // beats and of the positions are in nelssa_attn_out and nelssa_attn_pos): the cluster
  // entries consumed never exceed the command's clusters; done_o is a one-cycle pulse; a score
  // is scaled by this command's c.
  `NELSSA_ASSERT(CluPoppedBounded, state_q == StIdle || clu_popped_q <= nclu_q)
  `NELSSA_ASSERT_NEVER(DoneTwice, done_o && $past(done_o))
  `NELSSA_ASSERT(ScaleReady, !kscore_ctrl.fold_done || c_ready_q)
endmodule
