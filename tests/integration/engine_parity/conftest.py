import pytest


@pytest.fixture(autouse=True, scope="package")
def one_torch_thread(torch_threads):
    with torch_threads(1):
        yield
