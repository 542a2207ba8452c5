// A PNM device as software sees it: the register block (CXL.io MMIO) and the CXL.mem slave onto
// the device memory's request ports (nelssa_ddr5_frontend). Port 0 of the memory belongs to the
// host (CXL.mem); ports 1..NumMemPorts-1 are reserved for the command path and idle here.
module nelssa_device
  import nelssa_dev_pkg::*;
#(
  parameter int unsigned NumMemPorts = 4,             // request ports of the memory front end
  parameter int unsigned AddrW       = 40,            // device-memory address width
  parameter longint      MemBytes    = 64'd1 << 36,   // HDM window (64 GiB)
  parameter logic [31:0] Caps        = 32'h0040_0374, // engines 4, 8 query heads, hd 64+128, 64 tok
  localparam int unsigned PortW      = (NumMemPorts > 1) ? $clog2(NumMemPorts) : 1  // port id
) (
  input  logic                              clk_i,
  input  logic                              rst_ni,
  // CXL.io register access
  input  logic                              mmio_valid_i,
  output logic                              mmio_ready_o,
  input  logic                              mmio_write_i,
  input  logic [15:0]                       mmio_tag_i,
  input  logic [31:0]                       mmio_offset_i,
  input  logic [31:0]                       mmio_wdata_i,
  output logic                              mmio_rsp_valid_o,
  input  logic                              mmio_rsp_ready_i,
  output logic [15:0]                       mmio_rsp_tag_o,
  output logic [31:0]                       mmio_rsp_data_o,
  // CXL.mem
  input  logic                              req_valid_i,
  output logic                              req_ready_o,
  input  logic [15:0]                       req_tag_i,
  input  logic [63:0]                       req_addr_i,
  input  logic                              rwd_valid_i,
  output logic                              rwd_ready_o,
  input  logic [15:0]                       rwd_tag_i,
  input  logic [63:0]                       rwd_addr_i,
  input  logic [63:0]                       rwd_be_i,
  input  logic [511:0]                      rwd_data_i,
  output logic                              ndr_valid_o,
  input  logic                              ndr_ready_i,
  output logic [15:0]                       ndr_tag_o,
  output logic [7:0]                        ndr_status_o,
  output logic                              drs_valid_o,
  input  logic                              drs_ready_i,
  output logic [15:0]                       drs_tag_o,
  output logic [7:0]                        drs_status_o,
  output logic [511:0]                      drs_data_o,
  // device memory (nelssa_ddr5_frontend ports)
  output logic [NumMemPorts-1:0]            mem_valid_o,
  input  logic [NumMemPorts-1:0]            mem_ready_i,
  output logic [NumMemPorts-1:0][AddrW-1:0] mem_addr_o,
  output logic [NumMemPorts-1:0]            mem_write_o,
  output logic [NumMemPorts-1:0][15:0]      mem_tag_o,
  output logic [NumMemPorts-1:0][511:0]     mem_wdata_o,
  output logic [NumMemPorts-1:0][63:0]      mem_wstrb_o,
  input  logic [NumMemPorts-1:0]            mem_cpl_valid_i,
  input  logic [NumMemPorts-1:0][15:0]      mem_cpl_tag_i,
  input  logic [7:0]                        mem_rd_valid_i,
  input  logic [7:0][PortW-1:0]             mem_rd_port_i,
  input  logic [7:0][15:0]                  mem_rd_tag_i,
  input  logic [7:0][511:0]                 mem_rd_data_i,
  output logic                              idle_o
);
  logic err_mem;
  logic [7:0] host_rd;

  // rings and counters wait for the command path; the registers hold what software wrote
  /* verilator lint_off UNUSEDSIGNAL */
  logic        enable, ring_reset;
  logic [63:0] sq_base, cq_base, region_base, region_limit;
  logic [31:0] sq_size, sq_tail, cq_size, cq_head;
  logic [NumMemPorts-1:0][15:0] cpl_tag_unused;
  logic [NumMemPorts-1:0]       port_flags_unused;
  /* verilator lint_on UNUSEDSIGNAL */

  nelssa_regs #(
    .Caps    (Caps),
    .MemBytes(MemBytes)
  ) u_regs (
    .clk_i         (clk_i),
    .rst_ni        (rst_ni),
    .mmio_valid_i  (mmio_valid_i),
    .mmio_ready_o  (mmio_ready_o),
    .mmio_write_i  (mmio_write_i),
    .mmio_tag_i    (mmio_tag_i),
    .mmio_offset_i (mmio_offset_i),
    .mmio_wdata_i  (mmio_wdata_i),
    .rsp_valid_o   (mmio_rsp_valid_o),
    .rsp_ready_i   (mmio_rsp_ready_i),
    .rsp_tag_o     (mmio_rsp_tag_o),
    .rsp_data_o    (mmio_rsp_data_o),
    .enable_o      (enable),
    .sq_base_o     (sq_base),
    .sq_size_o     (sq_size),
    .sq_tail_o     (sq_tail),
    .cq_base_o     (cq_base),
    .cq_size_o     (cq_size),
    .cq_head_o     (cq_head),
    .region_base_o (region_base),
    .region_limit_o(region_limit),
    .ring_reset_o  (ring_reset),
    .sq_head_i     (32'd0),
    .cq_tail_i     (32'd0),
    .idle_i        (1'b1),
    .err_desc_i    (1'b0),
    .err_mem_i     (err_mem),
    .desc_done_i   (1'b0),
    .busy_i        (1'b0),
    .bytes_read_i  (16'd0)
  );

  for (genvar l = 0; l < 8; l++) begin : gen_host_rd
    assign host_rd[l] = mem_rd_valid_i[l] && mem_rd_port_i[l] == '0;
  end

  nelssa_cxl_mem_slave #(
    .AddrW   (AddrW),
    .MemBytes(MemBytes)
  ) u_cxl (
    .clk_i          (clk_i),
    .rst_ni         (rst_ni),
    .req_valid_i    (req_valid_i),
    .req_ready_o    (req_ready_o),
    .req_tag_i      (req_tag_i),
    .req_addr_i     (req_addr_i),
    .rwd_valid_i    (rwd_valid_i),
    .rwd_ready_o    (rwd_ready_o),
    .rwd_tag_i      (rwd_tag_i),
    .rwd_addr_i     (rwd_addr_i),
    .rwd_be_i       (rwd_be_i),
    .rwd_data_i     (rwd_data_i),
    .ndr_valid_o    (ndr_valid_o),
    .ndr_ready_i    (ndr_ready_i),
    .ndr_tag_o      (ndr_tag_o),
    .ndr_status_o   (ndr_status_o),
    .drs_valid_o    (drs_valid_o),
    .drs_ready_i    (drs_ready_i),
    .drs_tag_o      (drs_tag_o),
    .drs_status_o   (drs_status_o),
    .drs_data_o     (drs_data_o),
    .mem_valid_o    (mem_valid_o[0]),
    .mem_ready_i    (mem_ready_i[0]),
    .mem_write_o    (mem_write_o[0]),
    .mem_addr_o     (mem_addr_o[0]),
    .mem_tag_o      (mem_tag_o[0]),
    .mem_wdata_o    (mem_wdata_o[0]),
    .mem_wstrb_o    (mem_wstrb_o[0]),
    .mem_cpl_valid_i(mem_cpl_valid_i[0]),
    .mem_cpl_tag_i  (mem_cpl_tag_i[0]),
    .mem_rd_valid_i (host_rd),
    .mem_rd_tag_i   (mem_rd_tag_i),
    .mem_rd_data_i  (mem_rd_data_i),
    .err_o          (err_mem)
  );

  for (genvar p = 1; p < NumMemPorts; p++) begin : gen_idle_ports
    assign mem_valid_o[p] = 1'b0;
    assign mem_addr_o[p]  = '0;
    assign mem_write_o[p] = 1'b0;
    assign mem_tag_o[p]   = '0;
    assign mem_wdata_o[p] = '0;
    assign mem_wstrb_o[p] = '0;
  end
  assign cpl_tag_unused = mem_cpl_tag_i;
  assign port_flags_unused = mem_ready_i ^ mem_cpl_valid_i;

  assign idle_o = 1'b1;
endmodule
