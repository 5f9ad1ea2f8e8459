import pytest


@pytest.fixture(autouse=True, scope="package")
def one_torch_thread(torch_threads):
    with torch_threads(1):
        yield


@pytest.fixture(scope="session")
def smollm2_path() -> str:
    """The built-in trained model's folder: converted from its GGUF once per machine, then reused."""
    from floodway.engine.models.builtin import resolve_model
    from floodway.engine.models.smollm2 import NAME

    return resolve_model(NAME)
