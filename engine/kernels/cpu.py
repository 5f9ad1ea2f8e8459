"""Our CPU kernels' compiled module (cpu_module.c and the kernels it calls), built by setup.py where a C compiler is:
`lib` is None where it was not built, and `available()` says whether this machine runs it."""

try:
    from floodway.engine.kernels import _cpu as lib
except ImportError:  # not built here: the engine uses torch's kernels
    lib = None


def available() -> bool:
    """Built, and this CPU has AVX-512 with BF16 (what the kernels are compiled for)."""
    return lib is not None and lib.supported()
