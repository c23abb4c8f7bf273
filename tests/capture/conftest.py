import pytest
import torch


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Every capture test compiles from empty Dynamo caches and leaves them empty."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
