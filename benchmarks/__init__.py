"""`make bench`: the arena's performance claims, each timed side by side with the alternative it replaces.

One module per pair (bench_batched, bench_dpsgd, bench_reconstruction, bench_tournament,
bench_memory), each with ``run(quick, repeats) -> timing.Section``; ``python -m benchmarks`` runs them and writes
benchmarks/results.md (machine, every figure, its target, and the command that produced it).
"""
