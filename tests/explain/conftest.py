import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Every test starts and ends with empty Dynamo caches and no dynascope observer running."""
    from dynascope.explain import observer

    torch._dynamo.reset()
    yield
    observer.stop_observing()
    observer._LAST = None
    torch._dynamo.reset()
