import getpass
import importlib.util
import os
import pathlib
import sys
import tempfile

import pytest

# The suite starts some 150 Python processes (traced scripts, torchrun ranks, DataLoader workers): each one
# would compile dynascope's sources (and pytest its test modules) again where PYTHONDONTWRITEBYTECODE is set.
# The bytecode caches go to __pycache__ (ignored by git); this saves about 0.2 s a process.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
# Inductor's compiled kernels: one cache for this user's test runs, outside any checkout (as torch's own default
# is), so that a fresh clone's suite compiles only what earlier runs have not. torch keys each entry by its
# version, the graph and the config; the tests that need a cold or a private cache set their own.
try:
    _USER = getpass.getuser()
except (KeyError, OSError):  # a container's uid without a name
    _USER = str(os.getuid())
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), f"dynascope-tests-inductor-{_USER}"))

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
    "explain/test_memory.py",
    "explain/test_module_and_why.py",
    "explain/test_observer.py",
    "ranks",
    "seeds",
    "trace/test_config.py",
    "trace/test_durability.py",
    "test_procs.py",
    "test_torch_accessors.py",
]
if importlib.util.find_spec("torch") is None:
    collect_ignore = NEEDS_TORCH


def pytest_xdist_make_scheduler(config, log):
    """Under `-n N`: each test on its own, as `--dist load`, except that the tests of a module with a shared
    fixture (scope="module": a traced run, a torchrun job) go to one worker, which makes the fixture once.
    Those modules are handed out first (xdist orders work by its number of tests), the single tests then
    fill the gaps. (`--dist loadgroup` would do this with marks, but pytest 9.2 ignores its renamed nodes.)"""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    tests = pathlib.Path(__file__).parent
    shared = {
        path.relative_to(config.rootpath).as_posix()
        for path in tests.rglob("test_*.py")
        if 'scope="module"' in path.read_text(encoding="utf-8")
    }

    class SharedFixturesTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in shared else nodeid

    return SharedFixturesTogether(config, log)


@pytest.fixture(autouse=True)
def no_session_leaks():
    """A test that leaves a trace session open would change what later tests in its worker see."""
    yield
    from dynascope.trace import session

    active = session.current_session()
    if active is not None:
        active.finalize()
        pytest.fail(f"the test left a trace session open: {active.path}")


# DYNASCOPE_TESTS_CPU_LOG=FILE: a line per test (own CPU s, CPU s of the children it waited for, wall s, start,
# worker, test id), to find where the suite's time goes. The children's column counts the commands run through a
# zygote (support/procs.py) too, with their own children (torchrun's ranks); not the zygotes' own start.
if os.environ.get("DYNASCOPE_TESTS_CPU_LOG"):
    import resource
    import time as _time

    from support import procs

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        def cpu():
            own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
            return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime + procs.children_cpu
        (a, b), t = cpu(), _time.time()
        yield
        (c, d), u = cpu(), _time.time()
        with open(os.environ["DYNASCOPE_TESTS_CPU_LOG"], "a") as f:
            f.write(f"{c - a:.2f}\t{d - b:.2f}\t{u - t:.2f}\t{t:.1f}\t{os.environ.get('PYTEST_XDIST_WORKER')}\t{item.nodeid}\n")
