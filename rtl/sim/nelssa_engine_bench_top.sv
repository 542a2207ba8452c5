// Simulation top of the attention engine for its C++ harness (hw/sim/engine_harness.cpp).
// Every input is registered here: what the harness applies before a rising edge reaches the
// engine in the cycle after that edge. The engine's inputs then change only at clock edges, so
// a Verilated model evaluates the engine's datapath once per cycle, after the edge, rather than
// once for new inputs and again for the new state. The outputs are the engine's, unregistered.
module nelssa_engine_bench_top
  import nelssa_engine_pkg::*;
#(
  parameter int unsigned HeadDim          = 128,  // nelssa_attn_engine's HeadDim
  parameter int unsigned NumQHeads        = 8,    // nelssa_attn_engine's NumQHeads
  parameter int unsigned MaxClusterTokens = 64,   // nelssa_attn_engine's MaxClusterTokens
  parameter int unsigned Bf16MulLatency   = 0,    // nelssa_attn_engine's Bf16MulLatency
  parameter int unsigned AddLatency       = 0,    // nelssa_attn_engine's AddLatency
  parameter int unsigned MulLatency       = 0,    // nelssa_attn_engine's MulLatency
  parameter int unsigned Exp2Latency      = 0,    // nelssa_attn_engine's Exp2Latency
  parameter int unsigned Log2Latency      = 0,    // nelssa_attn_engine's Log2Latency
  parameter int unsigned RecipLatency     = 0,    // nelssa_attn_engine's RecipLatency
  parameter int unsigned ComputeLanes     = 32    // nelssa_attn_engine's ComputeLanes
) (
  input  logic              clk_i,
  input  logic              rst_ni,
  // inputs of the next cycle (nelssa_attn_engine's ports)
  input  logic              cmd_valid_i,
  input  logic [7:0]        cmd_head_dim_i,
  input  logic [3:0]        cmd_num_qheads_i,
  input  logic [15:0]       cmd_num_clusters_i,
  input  logic [31:0]       cmd_scale_i,
  input  logic              clu_valid_i,
  input  logic [7:0]        clu_tokens_i,
  input  logic              kv_valid_i,
  input  logic [BEAT_W-1:0] kv_data_i,
  input  logic              kv_last_i,
  input  logic              res_ready_i,
  // the engine's outputs in this cycle
  output logic              cmd_ready_o,
  output logic              clu_ready_o,
  output logic              kv_ready_o,
  output logic              res_valid_o,
  output logic [BEAT_W-1:0] res_data_o,
  output logic              res_last_o,
  output logic              done_o,
  output status_e           status_o,
  output logic              busy_o
);
  logic              cmd_valid_q, clu_valid_q, kv_valid_q, kv_last_q, res_ready_q;
  logic [7:0]        cmd_head_dim_q, clu_tokens_q;
  logic [3:0]        cmd_num_qheads_q;
  logic [15:0]       cmd_num_clusters_q;
  logic [31:0]       cmd_scale_q;
  logic [BEAT_W-1:0] kv_data_q;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      cmd_valid_q <= 1'b0;
      clu_valid_q <= 1'b0;
      kv_valid_q  <= 1'b0;
      res_ready_q <= 1'b0;
    end else begin
      cmd_valid_q <= cmd_valid_i;
      clu_valid_q <= clu_valid_i;
      kv_valid_q  <= kv_valid_i;
      res_ready_q <= res_ready_i;
    end
  end

  always_ff @(posedge clk_i) begin
    cmd_head_dim_q     <= cmd_head_dim_i;
    cmd_num_qheads_q   <= cmd_num_qheads_i;
    cmd_num_clusters_q <= cmd_num_clusters_i;
    cmd_scale_q        <= cmd_scale_i;
    clu_tokens_q       <= clu_tokens_i;
    kv_data_q          <= kv_data_i;
    kv_last_q          <= kv_last_i;
  end

  nelssa_attn_engine #(
    .HeadDim         (HeadDim),
    .NumQHeads       (NumQHeads),
    .MaxClusterTokens(MaxClusterTokens),
    .Bf16MulLatency  (Bf16MulLatency),
    .AddLatency      (AddLatency),
    .MulLatency      (MulLatency),
    .Exp2Latency     (Exp2Latency),
    .Log2Latency     (Log2Latency),
    .RecipLatency    (RecipLatency),
    .ComputeLanes    (ComputeLanes)
  ) u_engine (
    .clk_i,
    .rst_ni,
    .cmd_valid_i       (cmd_valid_q),
    .cmd_ready_o,
    .cmd_head_dim_i    (cmd_head_dim_q),
    .cmd_num_qheads_i  (cmd_num_qheads_q),
    .cmd_num_clusters_i(cmd_num_clusters_q),
    .cmd_scale_i       (cmd_scale_q),
    .clu_valid_i       (clu_valid_q),
    .clu_ready_o,
    .clu_tokens_i      (clu_tokens_q),
    .kv_valid_i        (kv_valid_q),
    .kv_ready_o,
    .kv_data_i         (kv_data_q),
    .kv_last_i         (kv_last_q),
    .res_valid_o,
    .res_ready_i       (res_ready_q),
    .res_data_o,
    .res_last_o,
    .done_o,
    .status_o,
    .busy_o
  );
endmodule
