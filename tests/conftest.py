import importlib.util
import os

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".venv", "inductor-cache"))


import pytest

# Without torch (the torch-free matrix sessions) these need torch for every test they hold; the
# rest of the suite (decompiler, analysis, rendering, the trace writer) runs on any CPython.
NEEDS_TORCH = [
    "capture",
    "cli/test_run.py",
    "cli/test_break_costs_cli.py",
    "cli/test_compile_figures.py",
    "cli/test_user_frames.py",
    "corpus/test_corpus.py",
    "debug",
    "decompiler/test_decompile_dynamo.py",
    "explain/test_command.py",
    "explain/test_explain_toy.py",
    "explain/test_module_and_why.py",
    "explain/test_observer.py",
    "ranks",
    "seeds",
    "trace/test_config.py",
    "trace/test_durability.py",
    "test_torch_accessors.py",
]
if importlib.util.find_spec("torch") is None:
    collect_ignore = NEEDS_TORCH


@pytest.fixture(autouse=True)
def no_session_leaks():
    """A test that leaves a trace session open would change what later tests in its worker see."""
    yield
    from dynascope.trace import session

    active = session.current_session()
    if active is not None:
        active.finalize()
        pytest.fail(f"the test left a trace session open: {active.path}")
