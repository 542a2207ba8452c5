// The register BAR of a board: an AXI4-Lite slave (as a PCIe IP presents BAR 0) onto the
// device's register port (nelssa_regs). One access at a time; a write waiting together with a
// read goes first, so a read the host issued after a write (PCIe keeps them in that order) sees
// it. Only whole 32-bit writes reach the registers: a write with a partial strobe changes
// nothing and answers SLVERR. Offsets the register block does not map read 0xFFFF_FFFF there;
// a read the block answers with an error status answers SLVERR.
`include "nelssa_assert.svh"

module nelssa_axil_regs
  import nelssa_dev_pkg::*;
#(
  parameter int unsigned AddrW = 12  // AXI4-Lite byte-address width (the BAR is 4 KB)
) (
  input  logic             clk_i,
  input  logic             rst_ni,
  // AXI4-Lite slave
  input  logic             s_awvalid_i,
  output logic             s_awready_o,
  input  logic [AddrW-1:0] s_awaddr_i,
  input  logic             s_wvalid_i,
  output logic             s_wready_o,
  input  logic [31:0]      s_wdata_i,
  input  logic [3:0]       s_wstrb_i,
  output logic             s_bvalid_o,
  input  logic             s_bready_i,
  output logic [1:0]       s_bresp_o,
  input  logic             s_arvalid_i,
  output logic             s_arready_o,
  input  logic [AddrW-1:0] s_araddr_i,
  output logic             s_rvalid_o,
  input  logic             s_rready_i,
  output logic [31:0]      s_rdata_o,
  output logic [1:0]       s_rresp_o,
  // device register port
  output logic             mmio_valid_o,
  input  logic             mmio_ready_i,
  output mmio_req_t        mmio_o,
  input  logic             mmio_rsp_valid_i,
  output logic             mmio_rsp_ready_o,
  input  mmio_rsp_t        mmio_rsp_i
);
  if (AddrW < 12 || AddrW > 32) begin : gen_addr_check
    $error("nelssa_axil_regs: AddrW must be 12..32 (the register window is 4 KB)");
  end

  localparam logic [1:0] RESP_OKAY = 2'b00;
  localparam logic [1:0] RESP_SLVERR = 2'b10;

  typedef enum logic [2:0] {
    IDLE,      // waiting for a request
    WR_ISSUE,  // a write on the register port
    WR_RESP,   // B
    RD_ISSUE,  // a read on the register port
    RD_WAIT,   // its data
    RD_RESP    // R
  } state_e;

  state_e            state_q, state_d;
  logic [AddrW-1:0]  addr_q, addr_d;
  logic [31:0]       data_q, data_d;
  logic [1:0]        resp_q, resp_d;

  logic take_write, take_read;
  assign take_write = state_q == IDLE && s_awvalid_i && s_wvalid_i;
  assign take_read = state_q == IDLE && s_arvalid_i && !take_write;

  always_comb begin
    state_d = state_q;
    addr_d = addr_q;
    data_d = data_q;
    resp_d = resp_q;
    unique case (state_q)
      IDLE: begin
        if (take_write) begin
          addr_d = s_awaddr_i;
          data_d = s_wdata_i;
          resp_d = (s_wstrb_i == 4'hF) ? RESP_OKAY : RESP_SLVERR;
          state_d = (s_wstrb_i == 4'hF) ? WR_ISSUE : WR_RESP;
        end else if (take_read) begin
          addr_d = s_araddr_i;
          resp_d = RESP_OKAY;
          state_d = RD_ISSUE;
        end
      end
      WR_ISSUE: if (mmio_ready_i) state_d = WR_RESP;
      WR_RESP: if (s_bready_i) state_d = IDLE;
      RD_ISSUE: if (mmio_ready_i) state_d = RD_WAIT;
      RD_WAIT: begin
        if (mmio_rsp_valid_i) begin
          data_d = mmio_rsp_i.value;
          resp_d = (mmio_rsp_i.status == 8'(RSP_OK)) ? RESP_OKAY : RESP_SLVERR;
          state_d = RD_RESP;
        end
      end
      RD_RESP: if (s_rready_i) state_d = IDLE;
      default: state_d = IDLE;
    endcase
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      state_q <= IDLE;
      addr_q <= '0;
      data_q <= '0;
      resp_q <= RESP_OKAY;
    end else begin
      state_q <= state_d;
      addr_q <= addr_d;
      data_q <= data_d;
      resp_q <= resp_d;
    end
  end

  assign s_awready_o = take_write;
  assign s_wready_o = take_write;
  assign s_arready_o = take_read;
  assign s_bvalid_o = state_q == WR_RESP;
  assign s_bresp_o = resp_q;
  assign s_rvalid_o = state_q == RD_RESP;
  assign s_rdata_o = data_q;
  assign s_rresp_o = resp_q;

  assign mmio_valid_o = state_q == WR_ISSUE || state_q == RD_ISSUE;
  // one access at a time: the tag is not needed to match the answer
  assign mmio_o = '{opcode: (state_q == WR_ISSUE) ? 8'(MMIO_WRITE) : 8'(MMIO_READ), tag: '0,
                    offset: 32'(addr_q), value: data_q};
  assign mmio_rsp_ready_o = state_q == RD_WAIT;

  // ---- protocol rules ---------------------------------------------------------------------------
  // AXI: the master holds each channel's valid and payload until ready; so does this slave
  `NELSSA_ASSERT_HOLD(AwHeld, s_awvalid_i, s_awready_o, s_awaddr_i)
  `NELSSA_ASSERT_HOLD(WHeld, s_wvalid_i, s_wready_o, {s_wdata_i, s_wstrb_i})
  `NELSSA_ASSERT_HOLD(ArHeld, s_arvalid_i, s_arready_o, s_araddr_i)
  `NELSSA_ASSERT_HOLD(BHeld, s_bvalid_o, s_bready_i, s_bresp_o)
  `NELSSA_ASSERT_HOLD(RHeld, s_rvalid_o, s_rready_i, {s_rdata_o, s_rresp_o})
  `NELSSA_ASSERT_HOLD(MmioHeld, mmio_valid_o, mmio_ready_i, mmio_o)
  // the register port answers only the read it was asked
  `NELSSA_ASSERT_NEVER(RspUnasked, mmio_rsp_valid_i && state_q != RD_WAIT)

  /* verilator lint_off UNUSEDSIGNAL */
  logic [15:0] rsp_tag_unused;  // see mmio_o.tag
  /* verilator lint_on UNUSEDSIGNAL */
  assign rsp_tag_unused = mmio_rsp_i.tag;
endmodule
