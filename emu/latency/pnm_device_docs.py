"""The help of the PNM device description's fields (``description.PnmDevice``), here without
pydantic so that the command line's --preset, --ddr5-override, --subchannels, --fp-latency
and --compute-lanes can show it
without importing the description (a tenth of a second for each process)."""

from __future__ import annotations

PNM_DEVICE_DOCS = {
    "units": "attention units (engines) per device, 1..6: what the cycle model and the RTL "
             "device have",
    "ddr5": "DDR5 speed grade, a preset of hw/model/ddr5_timing.py: ddr5-4800, ddr5-5600, "
            "ddr5-6400, ddr5-6400an, ddr5-8000",
    "ddr5_overrides": "per-field replacements of the grade's timing, in tCK (e.g. {nRRD_S: 16, "
                      "nFAW: 64}), as Ramulator 2 takes them",
    "subchannels": "DDR5 sub-channels of 32 bits (4 channels x 2 in the RTL device)",
    "fp_latency": "cycles of each kind of the engines' arithmetic units (bf16_mul, add, mul, "
                  "exp2, log2, recip; 0..15 each, omitted: 0, combinational): the engines' "
                  "cycles follow them (hw/model/engine_cycles.py), their results do not",
    "compute_lanes": "lanes of a 32-lane K or V beat that each engine's datapath computes a "
                     "cycle (1, 2, 4, 8, 16 or 32; 32: a beat a cycle): a narrower datapath has "
                     "fewer multipliers and adders and takes 32/lanes cycles a beat; its results "
                     "do not change, its cycles and so the measured bandwidth do",
}
