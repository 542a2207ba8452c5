"""Needle-in-a-haystack at the attention level (host/gpu/needle.py): needle recall among the
selected clusters and relative output error against dense attention, swept over selection
ratios 1-10 % at RULER-like depths; prints a table and writes a PNG."""

from __future__ import annotations

import argparse
import statistics

from nelssa.host.gpu.needle import needle_case

DEPTHS = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[8192, 32768])
    parser.add_argument("--ratios", type=float, nargs="+",
                        default=[0.01, 0.02, 0.04, 0.06, 0.08, 0.10])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--distractors", type=float, default=0.03,
                        help="share of the context made of keys partly aligned with the query")
    parser.add_argument("--alignment", type=float, default=0.85,
                        help="how far the distractors point the needle's way (0..1)")
    parser.add_argument("--plot", default="needle.png")
    args = parser.parse_args()
    rows = []
    print(f"distractors: {args.distractors:.0%} of the context, alignment {args.alignment:g}")
    print(f"{'context':>8} {'selection':>9} {'recall min':>10} {'recall mean':>11} "
          f"{'rel. error mean':>15} {'max':>8}")
    for ctx in args.contexts:
        for ratio in args.ratios:
            res = [needle_case(ctx, d, ratio, seed, distractors=args.distractors,
                               distractor_alignment=args.alignment)
                   for d in DEPTHS for seed in range(args.seeds)]
            rec = [r.recall for r in res]
            err = [r.rel_error for r in res]
            rows.append((ctx, ratio, min(rec), statistics.mean(rec), statistics.mean(err)))
            print(f"{ctx:>8} {ratio:>9.0%} {min(rec):>10.2f} {statistics.mean(rec):>11.3f} "
                  f"{statistics.mean(err):>15.2e} {max(err):>8.2e}", flush=True)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for ctx in args.contexts:
        pts = [r for r in rows if r[0] == ctx]
        a.plot([100 * r[1] for r in pts], [r[3] for r in pts], "o-", label=f"{ctx // 1024}K")
        b.semilogy([100 * r[1] for r in pts], [r[4] for r in pts], "o-", label=f"{ctx // 1024}K")
    a.set_xlabel("selection (% of clusters)")
    a.set_ylabel("needle recall (mean)")
    b.set_xlabel("selection (% of clusters)")
    b.set_ylabel("relative output error (mean)")
    a.legend()
    b.legend()
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)
    print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
