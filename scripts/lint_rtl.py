"""`verilator --lint-only -Wall` on every synthesizable top under rtl/.

Waivers live in rtl/verilator.vlt, each with its reason."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from nelssa.hw.sim.rtl_sources import (
    DDR5_ADDR_MAPS,
    DDR5_BENCH,
    DDR5_CHECKER,
    DDR5_CTRL,
    DDR5_MEM,
    DDR5_SYSTEM,
    DEVICE,
    DEVICE_SIM,
    ENGINE,
    ENGINE_BENCH_TOP,
    ENGINE_PARTS,
    FP_STAGES_TOP,
    FP_UNITS,
    FP_UNITS_TOP,
    FPGA_TOP,
    PACKAGES,
    lint_command,
)
from nelssa.hw.sim.verilator import RTL_ROOT, setup_environment

TOPS = {p.stem: [*PACKAGES, *FP_UNITS] for p in FP_UNITS}
TOPS["nelssa_attn_engine"] = ENGINE
ENGINE_VARIANTS = [
    {"HeadDim": 128, "NumQHeads": 8, "MaxClusterTokens": 64},
    {"HeadDim": 64, "NumQHeads": 1, "MaxClusterTokens": 1},
    # pipelined units: an adder slower than a row (the V spacing), multipliers (result FIFO)
    {"HeadDim": 128, "NumQHeads": 2, "MaxClusterTokens": 8, "Bf16MulLatency": 1,
     "AddLatency": 3, "MulLatency": 2, "Exp2Latency": 4, "Log2Latency": 4, "RecipLatency": 4},
    {"HeadDim": 64, "NumQHeads": 1, "MaxClusterTokens": 1, "Bf16MulLatency": 2,
     "AddLatency": 1, "MulLatency": 1, "Exp2Latency": 0, "Log2Latency": 3, "RecipLatency": 0},
    # narrow datapaths: chunks of a beat, result beats in chunks; one lane, pipelined
    {"HeadDim": 128, "NumQHeads": 2, "MaxClusterTokens": 8, "ComputeLanes": 4},
    {"HeadDim": 64, "NumQHeads": 1, "MaxClusterTokens": 1, "ComputeLanes": 1,
     "Bf16MulLatency": 1, "AddLatency": 3, "MulLatency": 2, "Exp2Latency": 1, "Log2Latency": 0,
     "RecipLatency": 2},
]
PIPELINED_DEVICE = {"Bf16MulLatency": 1, "AddLatency": 3, "MulLatency": 2, "Exp2Latency": 1,
                    "Log2Latency": 0, "RecipLatency": 2}


def _lint(run: tuple) -> tuple[str, subprocess.CompletedProcess]:
    """One top's lint: its label and Verilator's exit."""
    top, srcs, params, defines = run
    cmd = lint_command(top, srcs, params, defines)
    label = top + (f" {params}" if params else "") + "".join(f" +{d}" for d in defines)
    return label, subprocess.run(cmd, capture_output=True, text=True)


def main() -> int:
    setup_environment()
    failed = []
    runs = [(top, srcs, {}) for top, srcs in TOPS.items() if top != "nelssa_attn_engine"]
    runs += [("nelssa_attn_engine", ENGINE, v) for v in ENGINE_VARIANTS]
    # the controller in both scheduler forms (rtl/mem/nelssa_ddr5_ctrl.sv): parallel, the
    # default, for synthesis; the tries for simulation
    runs += [("nelssa_ddr5_checker", DDR5_CHECKER, {}), ("nelssa_ddr5_ctrl", DDR5_CTRL, {}),
             ("nelssa_ddr5_ctrl", DDR5_CTRL, {"ParallelSched": 0}),
             ("nelssa_ddr5_bench_top", DDR5_BENCH, {}), ("nelssa_ddr5_mem", DDR5_MEM, {}),
             ("nelssa_ddr5_system", DDR5_SYSTEM, {}), ("nelssa_device", DEVICE, {}),
             ("nelssa_device_sim", DEVICE_SIM, {}), ("nelssa_fpga_top", FPGA_TOP, {}),
             ("nelssa_fpga_top", FPGA_TOP, {"NumChannels": 1, "NumUnits": 1, "ChanAddrW": 36}),
             # the latencies passed down to every engine (a board's, a described device's)
             ("nelssa_device_sim", DEVICE_SIM, {"NumUnits": 1, **PIPELINED_DEVICE}),
             ("nelssa_fpga_top", FPGA_TOP, {"NumUnits": 2, **PIPELINED_DEVICE}),
             # and the lanes (a narrow engine in each unit)
             ("nelssa_device_sim", DEVICE_SIM, {"NumUnits": 1, "ComputeLanes": 4}),
             ("nelssa_fpga_top", FPGA_TOP, {"NumUnits": 1, "NumChannels": 1, "ChanAddrW": 36,
                                            "ComputeLanes": 1, **PIPELINED_DEVICE})]
    amap = [RTL_ROOT / "mem" / "nelssa_ddr5_addr_map.sv"]
    runs += [("nelssa_ddr5_addr_map", amap, {"AddressMap": m}) for m in (0, 1, 2)]
    runs.append(("nelssa_ddr5_addr_maps", DDR5_ADDR_MAPS, {}))
    runs = [(top, srcs, params, ()) for top, srcs, params in runs]
    # the engine's composite blocks, and its units as simulation builds use them
    runs += [(part.stem, ENGINE, {}, ()) for part in ENGINE_PARTS]
    runs += [("nelssa_attn_engine", ENGINE, v, ("NELSSA_FP_GATED",)) for v in ENGINE_VARIANTS]
    runs.append(("nelssa_engine_bench_top", [*ENGINE, ENGINE_BENCH_TOP], {}, ("NELSSA_FP_GATED",)))
    runs.append(("nelssa_fp_units_top", [*PACKAGES, *FP_UNITS, FP_UNITS_TOP], {}, ()))
    runs += [(f"nelssa_fp32_{op}_staged", PACKAGES, {"Latency": n}, ())
             for op in ("add", "mul") for n in (0, 1, 2, 3, 4)]
    # exp2, log2 and the reciprocal in each of their forms (1: the function then a register;
    # 2, 3: staged; 4: a register more), in both builds: the engine variants above take only
    # some of them
    runs += [(f"nelssa_fp32_{op}", [*PACKAGES, *FP_UNITS], {"Latency": n}, gated)
             for op in ("exp2", "log2", "recip") for n in (1, 2, 3, 4)
             for gated in ((), ("NELSSA_FP_GATED",))]
    runs.append(("nelssa_fp_stages_top", [*PACKAGES, FP_STAGES_TOP], {}, ()))
    # a Verilator at a time per core (each is single-threaded): 94 s of CPU in all at df491d4,
    # which `make test` waits for before its tests
    # (the cores this process may use: a container's limit, not the host's count)
    with ThreadPoolExecutor(len(os.sched_getaffinity(0))) as pool:
        for label, proc in pool.map(_lint, runs):  # in order
            if proc.returncode != 0:
                failed.append(label)
                print(f"FAIL {label}\n{proc.stderr.strip()}")
            else:
                print(f"ok   {label}")
    if failed:
        print(f"lint: {len(failed)} of {len(runs)} tops have warnings")
        return 1
    print(f"lint: {len(runs)} tops clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
