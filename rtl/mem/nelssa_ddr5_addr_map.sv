// Address map of the device's memory front end: a byte address onto sub-channel, bank group,
// bank, row and column, the same maps as hw/model/ddr5_addr.py (0: cacheline, 1: row, 2: mop4).
// An address beyond the device raises err_o instead of wrapping. Combinational.
module nelssa_ddr5_addr_map #(
  parameter int unsigned AddrW      = 40,  // byte-address width
  parameter int unsigned AddressMap = 0    // 0 cacheline, 1 row, 2 mop4
) (
  input  logic [AddrW-1:0] addr_i,
  output logic [2:0]       sub_o,
  output logic [2:0]       bg_o,
  output logic [1:0]       bank_o,
  output logic [15:0]      row_o,
  output logic [5:0]       col_o,
  output logic             err_o
);
  // 8 sub-channels x 32 banks x 65536 rows x 4 KB = 64 GiB: 30 line bits above 6 offset bits
  localparam int unsigned LINE_BITS = 30;
  localparam int unsigned OFFSET_BITS = 6;

  if (AddrW <= LINE_BITS + OFFSET_BITS) begin : gen_width_check
    $error("nelssa_ddr5_addr_map: AddrW must exceed 36 so that out-of-range addresses exist");
  end
  if (AddressMap > 2) begin : gen_map_check
    $error("nelssa_ddr5_addr_map: AddressMap must be 0 (cacheline), 1 (row) or 2 (mop4)");
  end

  logic [LINE_BITS-1:0] line;
  // the byte offset within a line does not select anything
  /* verilator lint_off UNUSEDSIGNAL */
  logic [OFFSET_BITS-1:0] offset;
  /* verilator lint_on UNUSEDSIGNAL */
  logic [2:0] bg_raw;
  logic [1:0] bank_raw;

  assign {line, offset} = addr_i[LINE_BITS+OFFSET_BITS-1:0];
  assign err_o = |addr_i[AddrW-1:LINE_BITS+OFFSET_BITS];

  always_comb begin
    unique case (AddressMap)
      1: begin  // column, sub-channel, bank group, bank, row
        col_o    = line[5:0];
        sub_o    = line[8:6];
        bg_raw   = line[11:9];
        bank_raw = line[13:12];
        row_o    = line[29:14];
      end
      2: begin  // 4 lines of a row, sub-channel, bank group, rest of the column, bank, row
        col_o    = {line[11:8], line[1:0]};
        sub_o    = line[4:2];
        bg_raw   = line[7:5];
        bank_raw = line[13:12];
        row_o    = line[29:14];
      end
      default: begin  // sub-channel, bank group, column, bank, row
        sub_o    = line[2:0];
        bg_raw   = line[5:3];
        col_o    = line[11:6];
        bank_raw = line[13:12];
        row_o    = line[29:14];
      end
    endcase
    // mop4 spreads row strides over bank groups and banks
    bg_o   = (AddressMap == 2) ? bg_raw ^ row_o[2:0] : bg_raw;
    bank_o = (AddressMap == 2) ? bank_raw ^ row_o[4:3] : bank_raw;
  end
endmodule
