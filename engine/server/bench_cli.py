"""`floodway bench serve`: placeholder until the guidellm wrapper lands."""


def register_bench(bench_app) -> None:
    pass
