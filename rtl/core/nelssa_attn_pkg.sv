// Buses between the attention engine's control (nelssa_attn_engine) and its datapath stages:
// the K stage (nelssa_attn_kscore, one per query head), the softmax state (nelssa_attn_softmax,
// one per head), the V accumulation (nelssa_attn_vacc, one per head) and the finalisation and
// result beats (nelssa_attn_out). Fields have the widths of the engine's largest instance
// (beats per row up to 4, clusters up to 255 tokens, up to 8 query heads, 32 chunks a beat at
// one compute lane); a stage casts them to its own parameters' widths. A K or V beat is
// computed a chunk of ComputeLanes lanes a cycle (nelssa_attn_engine), chunk 0 in the cycle
// the beat is taken.
package nelssa_attn_pkg;
  // The control's phase events, from which the positions (nelssa_attn_pos) follow
  typedef struct packed {
    logic       cmd_take;     // a command is taken
    logic       k_chunk;      // a chunk of a K beat is issued
    logic       v_chunk;      // a chunk of a V beat is issued
    logic [4:0] chunk;        // ... its chunk within the beat
    logic       last_chunk;   // ... the beat's last chunk
    logic [1:0] part;         // ... its beat within the row (of a Q beat too)
    logic       row_end;      // ... the row's last beat
    logic [7:0] tok;          // ... its token within the cluster
    logic [7:0] ntok;         // tokens of the current cluster
    logic [2:0] bpr;          // beats per row of the command: 2 or 4
    logic       setup;        // the set-up state
    logic       setup_go;     // the set-up's first cycle
    logic       weights_on;   // the set-up or V state: the cluster's weights may be issued
  } phase_t;

  // K stage of one head
  typedef struct packed {
    logic       k_chunk;      // a chunk of a K beat is issued into the dot product
    logic [4:0] chunk;        // ... its chunk within the beat
    logic [1:0] part;         // beat within the row of a Q beat or a K chunk
    logic       dot_en;       // a beat sum leaves the dot product (stage 1 loads it)
    logic       s1_valid;     // stage 1 holds a beat sum
    logic       s1_last_row;  // ... the last of its row
    logic [1:0] s1_part;      // ... its beat within the row
    logic [2:0] bpr;          // beats per row of the command: 2 or 4
    logic       fold_go;      // a row's fold starts (its beat sums enter their delay lines)
    logic [2:0] fold_en;      // bit k-1: the fold's stage k has valid operands
    logic       fold_done;    // a row is folded: its scaling is issued
  } kscore_ctrl_t;

  // Softmax state of one head: running max, the cluster's scores then weights, alpha
  typedef struct packed {
    logic       cmd_take;     // a command is taken: the running max starts at -Inf
    logic       setup;        // the set-up state: the max so far takes the cluster's
    logic       setup_go;     // the set-up's first cycle: alpha is issued
    logic       alpha_load;   // alpha leaves its pipeline
    logic       sc_en;        // a score leaves the K stage
    logic [7:0] sc_tok;       // ... its token
    logic       wl_go;        // a weight is issued
    logic [7:0] wl_idx;       // ... its token
    logic       wout_en;      // a weight leaves its pipeline
    logic [7:0] wout_tok;     // ... its token
    logic [7:0] tok;          // the token of the V row now taken (its weight is read)
  } softmax_ctrl_t;

  // V accumulation of one head
  typedef struct packed {
    logic       cmd_take;     // a command is taken: o starts at zero, l at zero
    logic       v_chunk;      // a chunk of a V beat is issued: its products are issued
    logic [4:0] chunk;        // ... its chunk within the beat
    logic [1:0] part;         // ... its beat within the row
    logic       first_row;    // ... of the cluster's first row: o and l are rescaled by alpha
    logic       vi_en;        // a chunk's adds are issued
    logic [4:0] vi_chunk;     // ... its chunk within the beat
    logic [1:0] vi_part;      // ... its beat within the row
    logic       vi_first;     // ... of the cluster's first row
    logic       vo_en;        // a chunk's sums are written
    logic [4:0] vo_chunk;     // ... its chunk within the beat
    logic [1:0] vo_part;      // ... its beat within the row
  } vacc_ctrl_t;

  // Finalisation and result beats
  typedef struct packed {
    logic       fin_go;       // head `head` is issued into the finalisation
    logic       out;          // result beats are due
    logic [3:0] head;         // head finalised or output; `nq` in the LSE beat
    logic [3:0] nq;           // query heads of the command
    logic [2:0] obeat;        // result beat within the head
  } out_ctrl_t;
endpackage
