# Vivado project for an Alveo board (U55C or U250) around nelssa_fpga_top: XDMA (PCIe DMA and
# BAR bridge), the board's memory controllers (four DDR4 MIGs on the U250, the HBM on the U55C),
# a SmartConnect per memory channel (clock and width conversion), a clocking wizard for the core
# clock and a processor-system reset. Not run here (no Vivado on the project's machine): see
# docs/fpga.md, "What was checked". Written for Vivado 2023.2 with the Alveo board files.
#
#   .venv/bin/nelssa fpga plan --board alveo-u250 --vivado build/u250   # plan.tcl + sources.f
#   vivado -mode batch -source hw/fpga/vivado/build.tcl -tclargs build/u250
#
# build/u250/plan.tcl (written by `nelssa fpga plan --vivado`, hw/fpga/vivado.py) sets BOARD,
# PART, BOARD_PART, CLOCK_MHZ, MEM_CHANNELS and TOP; sources.f lists the SystemVerilog sources
# in compile order, ending with TOP (nelssa_fpga_board.sv): nelssa_fpga_top at the plan's
# parameters with its ports renamed for Vivado's AXI interface inference (s_axil, s_axi, and
# m<c>_axi per memory channel).

set out [lindex $argv 0]
source [file join $out plan.tcl]
set here [file dirname [file normalize [info script]]]

create_project nelssa_$BOARD [file join $out vivado] -part $PART -force
set_property board_part $BOARD_PART [current_project]
set fh [open [file join $out sources.f] r]
set sources [split [string trim [read $fh]] "\n"]
close $fh
add_files -norecurse $sources
set_property file_type SystemVerilog [get_files *.sv]
set_property include_dirs [file join $here .. .. .. rtl include] [current_fileset]
set_property top nelssa_board [current_fileset]

create_bd_design nelssa_board

# PCIe: XDMA, AXI-MM DMA, BAR0 -> AXI-Lite master (the register window), BAR2 -> AXI bridge
create_bd_cell -type ip -vlnv xilinx.com:ip:xdma xdma_0
apply_board_connection -board_interface pci_express -ip_intf xdma_0/pcie_mgt -diagram nelssa_board
apply_board_connection -board_interface pcie_perstn -ip_intf xdma_0/RST.sys_rst_n -diagram nelssa_board
set_property -dict [list \
  CONFIG.pl_link_cap_max_link_width {X16} CONFIG.pl_link_cap_max_link_speed {8.0_GT/s} \
  CONFIG.axi_data_width {512_bit} CONFIG.axisten_freq {250} \
  CONFIG.pf0_device_id {4E4C} CONFIG.PF0_DEVICE_ID_mqdma {4E4C} \
  CONFIG.axilite_master_en {true} CONFIG.axilite_master_size {4} \
  CONFIG.axilite_master_scale {Kilobytes} \
  CONFIG.axibar_num {1} CONFIG.pciebar2axibar_axil_master {0x00000000} \
  CONFIG.xdma_axi_intf_mm {AXI_Memory_Mapped} CONFIG.xdma_rnum_chnl {1} \
  CONFIG.xdma_wnum_chnl {1} CONFIG.pf0_bar2_enabled {true} CONFIG.pf0_bar2_64bit {true} \
  CONFIG.pf0_bar2_prefetchable {true} CONFIG.pf0_bar2_scale {Gigabytes} \
  CONFIG.pf0_bar2_size {16} \
] [get_bd_cells xdma_0]
create_bd_cell -type ip -vlnv xilinx.com:ip:util_ds_buf pcie_refclk
set_property CONFIG.C_BUF_TYPE {IBUFDSGTE} [get_bd_cells pcie_refclk]
apply_board_connection -board_interface pcie_refclk -ip_intf pcie_refclk/CLK_IN_D -diagram nelssa_board
connect_bd_net [get_bd_pins pcie_refclk/IBUF_DS_ODIV2] [get_bd_pins xdma_0/sys_clk]
connect_bd_net [get_bd_pins pcie_refclk/IBUF_OUT] [get_bd_pins xdma_0/sys_clk_gt]

# the core clock and its reset
create_bd_cell -type ip -vlnv xilinx.com:ip:clk_wiz core_clk
set_property -dict [list CONFIG.CLKOUT1_REQUESTED_OUT_FREQ $CLOCK_MHZ \
  CONFIG.PRIM_SOURCE {No_buffer}] [get_bd_cells core_clk]
connect_bd_net [get_bd_pins xdma_0/axi_aclk] [get_bd_pins core_clk/clk_in1]
create_bd_cell -type ip -vlnv xilinx.com:ip:proc_sys_reset core_rst
connect_bd_net [get_bd_pins core_clk/clk_out1] [get_bd_pins core_rst/slowest_sync_clk]
connect_bd_net [get_bd_pins core_clk/locked] [get_bd_pins core_rst/dcm_locked]
connect_bd_net [get_bd_pins xdma_0/axi_aresetn] [get_bd_pins core_rst/ext_reset_in]

# the device, as a module reference (its parameters are the plan's, set in the wrapper)
create_bd_cell -type module -reference $TOP nelssa_0
connect_bd_net [get_bd_pins core_clk/clk_out1] [get_bd_pins nelssa_0/clk]
connect_bd_net [get_bd_pins core_rst/peripheral_aresetn] [get_bd_pins nelssa_0/rst_n]

# host side: BAR0 AXI-Lite and (DMA + BAR2 bridge) through SmartConnects into the core clock
create_bd_cell -type ip -vlnv xilinx.com:ip:smartconnect host_lite
set_property -dict [list CONFIG.NUM_SI {1} CONFIG.NUM_CLKS {2}] [get_bd_cells host_lite]
connect_bd_intf_net [get_bd_intf_pins xdma_0/M_AXI_LITE] [get_bd_intf_pins host_lite/S00_AXI]
connect_bd_intf_net [get_bd_intf_pins host_lite/M00_AXI] [get_bd_intf_pins nelssa_0/s_axil]
create_bd_cell -type ip -vlnv xilinx.com:ip:smartconnect host_mm
set_property -dict [list CONFIG.NUM_SI {2} CONFIG.NUM_CLKS {2}] [get_bd_cells host_mm]
connect_bd_intf_net [get_bd_intf_pins xdma_0/M_AXI] [get_bd_intf_pins host_mm/S00_AXI]
connect_bd_intf_net [get_bd_intf_pins xdma_0/M_AXI_BYPASS] [get_bd_intf_pins host_mm/S01_AXI]
connect_bd_intf_net [get_bd_intf_pins host_mm/M00_AXI] [get_bd_intf_pins nelssa_0/s_axi]
foreach sc {host_lite host_mm} {
  connect_bd_net [get_bd_pins xdma_0/axi_aclk] [get_bd_pins $sc/aclk]
  connect_bd_net [get_bd_pins core_clk/clk_out1] [get_bd_pins $sc/aclk1]
  connect_bd_net [get_bd_pins xdma_0/axi_aresetn] [get_bd_pins $sc/aresetn]
}

# memory side: one SmartConnect per channel toward the board's controller
source [file join $here memory_$BOARD.tcl]
for {set c 0} {$c < $MEM_CHANNELS} {incr c} {
  create_bd_cell -type ip -vlnv xilinx.com:ip:smartconnect mem_sc_$c
  set_property -dict [list CONFIG.NUM_SI {1} CONFIG.NUM_CLKS {2}] [get_bd_cells mem_sc_$c]
  connect_bd_intf_net [get_bd_intf_pins nelssa_0/m_axi_$c] [get_bd_intf_pins mem_sc_$c/S00_AXI]
  connect_bd_net [get_bd_pins core_clk/clk_out1] [get_bd_pins mem_sc_$c/aclk]
  connect_bd_net [get_bd_pins core_rst/peripheral_aresetn] [get_bd_pins mem_sc_$c/aresetn]
  nelssa_memory_channel $c mem_sc_$c
}

assign_bd_address
validate_bd_design
save_bd_design
make_wrapper -files [get_files nelssa_board.bd] -top -import
set_property top nelssa_board_wrapper [current_fileset]

launch_runs impl_1 -to_step write_bitstream -jobs 8
wait_on_run impl_1
open_run impl_1
report_timing_summary -file [file join $out timing_summary.rpt]
report_utilization -file [file join $out utilization.rpt]
puts "bitstream: [glob [file join $out vivado nelssa_$BOARD.runs impl_1 *.bit]]"
