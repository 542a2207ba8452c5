"""Engine benchmark: stream beats consumed per cycle, and Verilator simulation speed.

Goal (issue: attention engine): >= 0.95 beats/cycle at head_dim 128, 4 query heads per KV head,
4096 tokens. Prints one row per configuration; run with `make bench`.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from nelssa.hw.model import fp
from nelssa.hw.model.engine import EngineCommand, EngineParams, attend
from nelssa.hw.sim.engine import RtlEngine

CONFIGS = [  # (head_dim, query heads, tokens per cluster, clusters)
    (128, 4, 16, 256),
    (128, 8, 16, 256),
    (128, 4, 64, 64),
    (64, 4, 16, 256),
    (128, 4, 4, 1024),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="back-to-back runs per config")
    args = parser.parse_args()
    engine = RtlEngine(EngineParams())
    rng = np.random.default_rng(0)
    print(f"{'head_dim':>8} {'qheads':>6} {'tokens':>6} {'cluster':>7} {'beats':>7} "
          f"{'cycles':>7} {'beats/cyc':>9} {'sim cyc/s':>10} {'model s':>8} {'bit-exact':>9}")
    for dim, heads, ctoks, nclu in CONFIGS:
        def bf(shape):
            return fp.f32_to_bf16_bits(rng.standard_normal(shape).astype(np.float32))

        q = bf((heads, dim))
        ks = [bf((ctoks, dim)) for _ in range(nclu)]
        vs = [bf((ctoks, dim)) for _ in range(nclu)]
        cmd = EngineCommand.from_workload(q, ks, vs, 1 / np.sqrt(dim))
        run = engine.run(cmd, repeat=args.repeat)
        t0 = time.perf_counter()
        model = attend(engine.params, q, ks, vs, 1 / np.sqrt(dim))
        model_s = time.perf_counter() - t0
        exact = np.array_equal(run.result.o, model.o) and np.array_equal(run.result.lse, model.lse)
        print(f"{dim:>8} {heads:>6} {ctoks * nclu:>6} {ctoks:>7} {run.kv_consumed:>7} "
              f"{run.kv_span:>7} {run.beats_per_cycle:>9.3f} "
              f"{run.total_cycles / run.sim_seconds:>10,.0f} {model_s:>8.2f} {exact!s:>9}")


if __name__ == "__main__":
    main()
