"""`nelssa plan`: the cheapest fleet mix that meets an SLO (a capacity search per mix on the
fleet emulator, costs in dollars per million output tokens, the Pareto front)."""
