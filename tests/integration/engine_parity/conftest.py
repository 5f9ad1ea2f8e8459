import pytest


@pytest.fixture(autouse=True, scope="package")
def one_torch_thread():
    """Tiny models gain nothing from a second thread, and on a shared 2-core machine OpenMP threads waiting for
    each other make every op many times slower; restored afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
