"""The control plane's benchmarks, replays and load generators (`floodway bench gateway|prediction|routing`).
They import the product and the product never imports them, so that what ships carries no measurement code
(tests/unit/test_bench_boundary.py holds the line); only the top-level CLI attaches their sub-app."""
