# Alveo U55C: the HBM2 (two stacks, 16 GB; AMD PG276 HBM controller) with one AXI port per
# channel of the FPGA top (SAXI_00, SAXI_04, ...: spread over the pseudo-channels so that each
# channel reaches its own part of the memory through the HBM switch). Sourced by build.tcl.
if {[llength [get_bd_cells -quiet hbm_0]] == 0} {
  create_bd_cell -type ip -vlnv xilinx.com:ip:hbm hbm_0
  set_property -dict [list CONFIG.USER_HBM_DENSITY {16GB} CONFIG.USER_HBM_STACK {2} \
    CONFIG.USER_SWITCH_ENABLE_00 {TRUE} CONFIG.USER_SWITCH_ENABLE_01 {TRUE} \
    CONFIG.USER_APB_EN {false}] [get_bd_cells hbm_0]
  create_bd_cell -type ip -vlnv xilinx.com:ip:clk_wiz hbm_clk
  apply_board_connection -board_interface sysclk0 -ip_intf hbm_clk/CLK_IN1_D -diagram nelssa_board
  set_property -dict [list CONFIG.CLKOUT1_REQUESTED_OUT_FREQ {100} \
    CONFIG.CLKOUT2_USED {true} CONFIG.CLKOUT2_REQUESTED_OUT_FREQ {450}] [get_bd_cells hbm_clk]
  connect_bd_net [get_bd_pins hbm_clk/clk_out1] [get_bd_pins hbm_0/HBM_REF_CLK_0]
  connect_bd_net [get_bd_pins hbm_clk/clk_out1] [get_bd_pins hbm_0/HBM_REF_CLK_1]
  connect_bd_net [get_bd_pins hbm_clk/clk_out1] [get_bd_pins hbm_0/APB_0_PCLK]
  connect_bd_net [get_bd_pins hbm_clk/clk_out1] [get_bd_pins hbm_0/APB_1_PCLK]
  connect_bd_net [get_bd_pins xdma_0/axi_aresetn] [get_bd_pins hbm_0/APB_0_PRESET_N]
  connect_bd_net [get_bd_pins xdma_0/axi_aresetn] [get_bd_pins hbm_0/APB_1_PRESET_N]
}
proc nelssa_memory_channel {c sc} {
  set port [format %02d [expr {$c * 4}]]
  set_property CONFIG.USER_SAXI_$port {true} [get_bd_cells hbm_0]
  connect_bd_intf_net [get_bd_intf_pins $sc/M00_AXI] [get_bd_intf_pins hbm_0/SAXI_${port}_8HI]
  connect_bd_net [get_bd_pins hbm_clk/clk_out2] [get_bd_pins $sc/aclk1]
  connect_bd_net [get_bd_pins hbm_clk/clk_out2] [get_bd_pins hbm_0/AXI_${port}_ACLK]
  connect_bd_net [get_bd_pins xdma_0/axi_aresetn] [get_bd_pins hbm_0/AXI_${port}_ARESET_N]
}
