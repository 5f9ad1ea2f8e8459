"""The engine's benchmarks, GPU checks and load generators (`floodway bench engine|serve`, `python -P -m
floodway.engine.bench.<module>`). They import the product and the product never imports them, so that what
ships and runs in a pod carries no measurement code (tests/unit/test_bench_boundary.py holds the line)."""
