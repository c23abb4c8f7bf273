"""The autouse fixture of the test folders that compile (explain/, decompiler/): each imports it in its
conftest.py, so that pytest registers it there."""

import importlib.util

import pytest

HAVE_TORCH = importlib.util.find_spec("torch") is not None


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Every test starts and ends with empty Dynamo caches and no dynascope observer running.
    The decompiler's tests run without torch too (the torch-free matrix sessions)."""
    if not HAVE_TORCH:
        yield
        return
    import torch

    from dynascope.explain.active_observer import SESSION

    torch._dynamo.reset()
    yield
    SESSION.end()
    torch._dynamo.reset()
