"""`nelssa sweep`: design-space sweeps of the serving emulator (issue 26): a spec (spec.py),
points run on a process pool or Ray (run.py), a results table and a Pareto plot (plot.py)."""
