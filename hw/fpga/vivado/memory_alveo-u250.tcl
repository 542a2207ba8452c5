# Alveo U250: channel c of the FPGA top is the board's DDR4 channel c (ddr4_sdram_c<c>, a MIG
# DDR4 IP per channel, 16 GB DDR4-2400 each; UG1120). Sourced by build.tcl.
proc nelssa_memory_channel {c sc} {
  create_bd_cell -type ip -vlnv xilinx.com:ip:ddr4 ddr4_$c
  apply_board_connection -board_interface ddr4_sdram_c$c -ip_intf ddr4_$c/C0_DDR4 -diagram nelssa_board
  apply_board_connection -board_interface default_300mhz_clk$c -ip_intf ddr4_$c/C0_SYS_CLK -diagram nelssa_board
  connect_bd_intf_net [get_bd_intf_pins $sc/M00_AXI] [get_bd_intf_pins ddr4_$c/C0_DDR4_S_AXI]
  connect_bd_net [get_bd_pins ddr4_$c/c0_ddr4_ui_clk] [get_bd_pins $sc/aclk1]
  create_bd_cell -type ip -vlnv xilinx.com:ip:proc_sys_reset ddr4_rst_$c
  connect_bd_net [get_bd_pins ddr4_$c/c0_ddr4_ui_clk] [get_bd_pins ddr4_rst_$c/slowest_sync_clk]
  connect_bd_net [get_bd_pins ddr4_$c/c0_ddr4_ui_clk_sync_rst] [get_bd_pins ddr4_rst_$c/ext_reset_in]
  connect_bd_net [get_bd_pins ddr4_rst_$c/peripheral_aresetn] [get_bd_pins ddr4_$c/c0_ddr4_aresetn]
  connect_bd_net [get_bd_pins xdma_0/axi_aresetn] [get_bd_pins ddr4_$c/sys_rst]
}
