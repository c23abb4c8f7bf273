import os
import sys

sys.path.insert(0, os.path.dirname(__file__))  # tests/tracecheck.py and friends
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".venv", "inductor-cache"))


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def no_session_leaks():
    """A test that leaves a trace session open would change what later tests in its worker see."""
    yield
    from dynascope.trace import session

    active = session.current_session()
    if active is not None:
        active.finalize()
        pytest.fail(f"the test left a trace session open: {active.path}")
