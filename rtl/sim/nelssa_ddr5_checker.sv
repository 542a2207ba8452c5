// Always-on JEDEC timing checker of one DDR5 sub-channel (simulation only).
//
// Watches the commands a controller issues, up to NumSlots per clock, each stamped with its tCK,
// and reports every broken rule: violation_o carries a mask of nelssa_ddr5_pkg RULE_* bits for
// the commands of that clock, violations_o counts them, and each one is printed as
// "<rule> violated at cycle <tCK>, bank group <g> bank <b>: <detail>". With Fatal (the default)
// the first violation ends the simulation with $fatal; otherwise each is a $warning. The rules
// and their names are those of hw/model/ddr5_checker.py, which the testbench compares against
// command by command.
// The rules between bank groups compare with the latest command of the kind in any group other
// than the command's own, kept with the latest overall, rather than with every other group in
// turn: one comparison per rule instead of seven, and the same verdict, since a gap to every
// other group is long enough exactly when the gap to the latest of them is.
// A rule of the command at tCK `cycle` to bank `k` of group `g` (names in scope where it is
// used): the message is formatted only when the rule is broken, since formatting it for every
// command cost more than the checks themselves.
`define NELSSA_NEED(rule, since, gap, what) \
  begin \
    if (cycle - (since) < longint'(int'(gap))) \
      fail(rule, cycle, g, k, $sformatf("%s needs %0d tCK, got %0d (previous at %0d)", what, \
                                        int'(gap), cycle - (since), since)); \
  end

module nelssa_ddr5_checker
  import nelssa_ddr5_pkg::*;
#(
  parameter timing_t     T        = DDR5_6400,  // timing preset (nelssa_ddr5_pkg)
  parameter int unsigned NumSlots = 3,          // commands per clock, in any tCK order
  parameter bit          Fatal    = 1'b1        // end the simulation on the first violation
) (
  input  logic                       clk_i,
  input  logic                       rst_ni,
  input  logic      [NumSlots-1:0]   cmd_valid_i,
  input  dram_cmd_e [NumSlots-1:0]   cmd_i,
  input  logic      [NumSlots-1:0][63:0] tck_i,
  input  logic      [NumSlots-1:0][2:0]  bg_i,
  input  logic      [NumSlots-1:0][1:0]  bank_i,
  input  logic      [NumSlots-1:0][16:0] row_i,
  output logic      [NUM_RULES-1:0] violation_o,
  output logic      [31:0]          violations_o
);
  localparam int NB = 32;
  localparam int NG = 8;
  localparam longint NEVER = -64'sd1000000000000;
  // READ to WRITE: the read's data and a turnaround tCK before the write's, and at least tCCD_S
  localparam int RTW = (T.nCL + 8 - T.nCWL + 1 < T.nCCD_S) ? T.nCCD_S : T.nCL + 8 - T.nCWL + 1;

  if (T.bank_groups != NG || T.banks_per_group != NB / NG) begin : gen_geometry_check
    $error("nelssa_ddr5_checker: built for 8 bank groups of 4 banks");
  end

  // kinds of command whose latest time is kept over the bank groups
  localparam int KIND_ACT = 0;
  localparam int KIND_RD = 1;
  localparam int KIND_WR = 2;

  // bank state and the last command times, in tCK
  longint open_row [NB];   // the row of the last ACT to each bank (open_mask: still open)
  logic [NB-1:0] open_mask;
  longint last_act [NB], last_pre [NB], last_rd [NB], last_wr [NB];
  longint group_act [NG], group_rd [NG], group_wr [NG];
  // per kind: the latest command (time, group) and the latest in any other group
  longint latest_t [3], other_t [3];
  int     latest_g [3], other_g [3];
  longint any_rd, ref_cycle, last_ref, ca_free, now, latest_pre;
  longint acts [4];
  int     num_acts;
  logic [NUM_RULES-1:0] mask;
  int unsigned count;

  // the latest command of kind k in a bank group other than g, and that group
  `define NELSSA_OTHER_T(k, g) ((latest_g[k] != (g)) ? latest_t[k] : other_t[k])
  `define NELSSA_OTHER_G(k, g) ((latest_g[k] != (g)) ? latest_g[k] : other_g[k])
  // a command of kind k in group g at tCK `cycle` (commands come in tCK order)
  `define NELSSA_NOTE(k, g) \
    begin \
      if (latest_g[k] != (g)) begin \
        other_t[k] = latest_t[k]; \
        other_g[k] = latest_g[k]; \
        latest_g[k] = (g); \
      end \
      latest_t[k] = cycle; \
    end

  function automatic string rule_name(int r);
    unique case (r)
      RULE_CA:        return "CA";
      RULE_STATE:     return "state";
      RULE_TRCD:      return "tRCD";
      RULE_TRP:       return "tRP";
      RULE_TRAS:      return "tRAS";
      RULE_TRC:       return "tRC";
      RULE_TRRD_S:    return "tRRD_S";
      RULE_TRRD_L:    return "tRRD_L";
      RULE_TFAW:      return "tFAW";
      RULE_TCCD_S:    return "tCCD_S";
      RULE_TCCD_L:    return "tCCD_L";
      RULE_TCCD_L_WR: return "tCCD_L_WR";
      RULE_TWTR_S:    return "tWTR_S";
      RULE_TWTR_L:    return "tWTR_L";
      RULE_TRTW:      return "tRTW";
      RULE_TRTP:      return "tRTP";
      RULE_TWR:       return "tWR";
      RULE_TRFC:      return "tRFC";
      RULE_TREFI:     return "tREFI";
      default:        return "?";
    endcase
  endfunction

  task automatic fail(int rule, longint cycle, int g, int b, string detail);
    mask[rule] = 1'b1;
    count++;
    if (Fatal) begin
      $fatal(1, "%s violated at cycle %0d, bank group %0d bank %0d: %s", rule_name(rule), cycle, g,
             b, detail);
    end else begin
      $warning("%s violated at cycle %0d, bank group %0d bank %0d: %s", rule_name(rule), cycle, g,
               b, detail);
    end
  endtask

  task automatic need(int rule, longint cycle, longint since, int gap, int g, int b,
                      string what);
    if (cycle - since < longint'(gap)) begin
      fail(rule, cycle, g, b, $sformatf("%s needs %0d tCK, got %0d (previous at %0d)", what, gap,
                                        cycle - since, since));
    end
  endtask

  function automatic int ca_cycles(dram_cmd_e c);
    unique case (c)
      CMD_ACT:  return CA_CYCLES_ACT;
      CMD_RD:   return CA_CYCLES_RD;
      CMD_WR:   return CA_CYCLES_WR;
      CMD_PRE:  return CA_CYCLES_PRE;
      CMD_PREA: return CA_CYCLES_PREA;
      CMD_REF:  return CA_CYCLES_REF;
      default:  return 1;
    endcase
  endfunction

  task automatic precharge(longint cycle, int g, int k);
    int b = g * 4 + k;
    if (!open_mask[b]) return;  // precharging a closed bank is a no-op
    `NELSSA_NEED(RULE_TRAS, last_act[b], T.nRAS, "ACT to PRE")
    `NELSSA_NEED(RULE_TRTP, last_rd[b], T.nRTP, "RD to PRE")
    `NELSSA_NEED(RULE_TWR, last_wr[b], T.nCWL + 8 + T.nWR, "WR to PRE")
    open_mask[b] = 1'b0;
    last_pre[b] = cycle;
    latest_pre = cycle;
  endtask

  // (the row is read from its slot only for an ACT, the one command that uses it)
  task automatic check(longint cycle, dram_cmd_e c, int g, int k, int slot);
    int b = g * 4 + k;
    now = cycle;
    if (cycle < ca_free) fail(RULE_CA, cycle, g, k, $sformatf("command bus busy until %0d",
                                                              ca_free));
    ca_free = cycle + longint'(ca_cycles(c));
    unique case (c)
      CMD_ACT: begin
        if (open_mask[b]) fail(RULE_STATE, cycle, g, k,
                               $sformatf("ACT to a bank with row %0d open", open_row[b]));
        `NELSSA_NEED(RULE_TRP, last_pre[b], T.nRP, "PRE to ACT")
        `NELSSA_NEED(RULE_TRC, last_act[b], T.nRC, "ACT to ACT, same bank")
        `NELSSA_NEED(RULE_TRFC, ref_cycle, T.nRFC, "REF to ACT")
        `NELSSA_NEED(RULE_TRRD_L, group_act[g], T.nRRD_L, "ACT to ACT, same bank group")
        // (spelled out, not through NELSSA_NEED: its message names the other group, and a
        // message formatted inside another's argument costs the model a string every clock)
        if (cycle - `NELSSA_OTHER_T(KIND_ACT, g) < longint'(int'(T.nRRD_S)))
          fail(RULE_TRRD_S, cycle, g, k, $sformatf(
              "ACT to ACT, other bank group %0d needs %0d tCK, got %0d (previous at %0d)",
              `NELSSA_OTHER_G(KIND_ACT, g), int'(T.nRRD_S), cycle - `NELSSA_OTHER_T(KIND_ACT, g),
              `NELSSA_OTHER_T(KIND_ACT, g)));
        if (num_acts == 4) `NELSSA_NEED(RULE_TFAW, acts[0], T.nFAW, "fifth ACT in a window")
        acts[0] = acts[1];
        acts[1] = acts[2];
        acts[2] = acts[3];
        acts[3] = cycle;
        if (num_acts < 4) num_acts++;
        open_row[b] = longint'(row_i[slot]);
        open_mask[b] = 1'b1;
        last_act[b] = cycle;
        group_act[g] = cycle;
        `NELSSA_NOTE(KIND_ACT, g)
      end
      CMD_RD: begin
        if (!open_mask[b]) fail(RULE_STATE, cycle, g, k, "RD to a precharged bank");
        `NELSSA_NEED(RULE_TRCD, last_act[b], T.nRCD, "ACT to RD")
        `NELSSA_NEED(RULE_TCCD_L, group_rd[g], T.nCCD_L, "RD to RD")
        `NELSSA_NEED(RULE_TCCD_S, `NELSSA_OTHER_T(KIND_RD, g), T.nCCD_S, "RD to RD")
        `NELSSA_NEED(RULE_TWTR_L, group_wr[g], T.nCWL + 8 + T.nWTR_L, "WR to RD")
        `NELSSA_NEED(RULE_TWTR_S, `NELSSA_OTHER_T(KIND_WR, g), T.nCWL + 8 + T.nWTR_S,
                     "WR to RD")
        last_rd[b] = cycle;
        group_rd[g] = cycle;
        any_rd = cycle;
        `NELSSA_NOTE(KIND_RD, g)
      end
      CMD_WR: begin
        if (!open_mask[b]) fail(RULE_STATE, cycle, g, k, "WR to a precharged bank");
        `NELSSA_NEED(RULE_TRCD, last_act[b], T.nRCD, "ACT to WR")
        `NELSSA_NEED(RULE_TCCD_L_WR, group_wr[g], T.nCCD_L_WR, "WR to WR")
        `NELSSA_NEED(RULE_TCCD_S, `NELSSA_OTHER_T(KIND_WR, g), T.nCCD_S, "WR to WR")
        `NELSSA_NEED(RULE_TRTW, any_rd, RTW, "RD to WR")
        last_wr[b] = cycle;
        group_wr[g] = cycle;
        `NELSSA_NOTE(KIND_WR, g)
      end
      CMD_PRE: precharge(cycle, g, k);
      CMD_PREA: begin
        for (int x = 0; x < NG; x++) begin
          for (int y = 0; y < 4; y++) precharge(cycle, x, y);
        end
      end
      CMD_REF: begin
        if (open_mask != '0) begin
          for (int x = 0; x < NB; x++) begin
            if (open_mask[x]) begin
              fail(RULE_STATE, cycle, x / 4, x % 4,
                   $sformatf("REF with %0d bank(s) open", $countones(open_mask)));
              break;
            end
          end
        end
        need(RULE_TRP, cycle, latest_pre, T.nRP, 0, 0, "PRE to REF");
        need(RULE_TRFC, cycle, ref_cycle, T.nRFC, 0, 0, "REF to REF");
        if (cycle - last_ref > (longint'(T.max_postponed_refresh) + 64'sd1) *
                               longint'(T.nREFI)) begin
          fail(RULE_TREFI, cycle, 0, 0, $sformatf("%0d tCK since the last refresh",
                                                  cycle - last_ref));
        end
        last_ref = cycle;
        ref_cycle = cycle;
      end
      default: fail(RULE_STATE, cycle, g, k, "unknown command");
    endcase
  endtask

  always_ff @(posedge clk_i or negedge rst_ni) begin
    // (the temporaries of a clock declared at the top of the block, where the Verilated model
    // keeps them in the evaluation's locals rather than in its own state)
    automatic logic [NumSlots-1:0] left;
    // (unpacked: a packed slot picked at run time costs shifts)
    automatic logic [63:0] tck [NumSlots];
    automatic int pick;
    if (!rst_ni) begin
      open_mask = '0;
      for (int b = 0; b < NB; b++) begin
        open_row[b] = '0;
        last_act[b] = NEVER;
        last_pre[b] = NEVER;
        last_rd[b]  = NEVER;
        last_wr[b]  = NEVER;
      end
      for (int g = 0; g < NG; g++) begin
        group_act[g] = NEVER;
        group_rd[g]  = NEVER;
        group_wr[g]  = NEVER;
      end
      for (int i = 0; i < 3; i++) begin
        latest_t[i] = NEVER;
        other_t[i]  = NEVER;
        latest_g[i] = 0;
        other_g[i]  = 0;
      end
      for (int i = 0; i < 4; i++) acts[i] = NEVER;
      num_acts  = 0;
      any_rd    = NEVER;
      ref_cycle = NEVER;
      last_ref  = 0;
      ca_free   = 0;
      latest_pre = NEVER;
      now       = NEVER;
      count     = 0;
      violation_o <= '0;
    end else begin
      mask = '0;
      left = cmd_valid_i;
      // verilator unroll_full
      for (int s = 0; s < NumSlots; s++) tck[s] = tck_i[s];
      // the commands of one clock in tCK order
      while (left != '0) begin
        pick = -1;
        // verilator unroll_full
        for (int s = 0; s < NumSlots; s++) begin
          if (left[s] && (pick < 0 || tck[s] < tck[pick])) pick = s;
        end
        left[pick] = 1'b0;
        if (longint'(tck[pick]) < now) begin
          $fatal(1, "nelssa_ddr5_checker: command at tCK %0d after one at %0d", tck[pick], now);
        end
        check(longint'(tck[pick]), cmd_i[pick], int'(bg_i[pick]), int'(bank_i[pick]), pick);
      end
      violation_o <= mask;
    end
  end

  assign violations_o = count;
endmodule

`undef NELSSA_NEED
`undef NELSSA_OTHER_T
`undef NELSSA_OTHER_G
`undef NELSSA_NOTE
