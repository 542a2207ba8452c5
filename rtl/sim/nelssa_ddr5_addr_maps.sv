// Every address map of nelssa_ddr5_addr_map side by side on one address: map m's decode in
// element m of each output. Simulation only: one build tests all three maps against the model
// (tests/rtl/test_ddr5_addr_map.py) where a build per map cost three times as much. Combinational.
module nelssa_ddr5_addr_maps #(
  parameter int unsigned AddrW = 40,  // byte-address width
  localparam int unsigned NumMaps = 3  // 0 cacheline, 1 row, 2 mop4
) (
  input  logic [AddrW-1:0]          addr_i,
  output logic [NumMaps-1:0][2:0]   sub_o,
  output logic [NumMaps-1:0][2:0]   bg_o,
  output logic [NumMaps-1:0][1:0]   bank_o,
  output logic [NumMaps-1:0][15:0]  row_o,
  output logic [NumMaps-1:0][5:0]   col_o,
  output logic [NumMaps-1:0]        err_o
);
  for (genvar m = 0; m < NumMaps; m++) begin : gen_map
    nelssa_ddr5_addr_map #(
      .AddrW     (AddrW),
      .AddressMap(m)
    ) u_map (
      .addr_i(addr_i),
      .sub_o (sub_o[m]),
      .bg_o  (bg_o[m]),
      .bank_o(bank_o[m]),
      .row_o (row_o[m]),
      .col_o (col_o[m]),
      .err_o (err_o[m])
    );
  end
endmodule
