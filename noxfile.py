"""The version matrix: `make matrix` runs every session below; `make matrix ARGS='-s torch_free'`
the torch-free ones, `make matrix ARGS='-t ci'` what CI runs, `make matrix ARGS=-l` lists them.

Each session builds a scratch venv under .nox/ (never the project's .venv) and installs dynascope
from this checkout (not editable, so the installed package with its data files is what is tested).

  full(<python>-torch<v>)  the whole test suite on one torch and one Python: the oldest torch we
                           claim, a middle one (2.8) and the newest release on 3.11, the newest
                           release on 3.12 and 3.13
  torch_free(<python>)     what runs without torch (decompiler, analysis, rendering) on CPython
                           3.10 to 3.13, plus the decompiler's stdlib round trip (CPython's own
                           test suites, run with every function swapped for its decompiled self)

Torch's CUDA builds are what the registry serves for these versions (they run on the CPU). The
machine's pip configuration may cap torch below the newest release; each session lifts the cap for
its own venv only (PIP_CONSTRAINT=/dev/null).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import nox

OLDEST_TORCH = "2.5.1"  # keep equal to the floor in pyproject.toml
NEWEST_TORCH = "2.15.0"  # below the cap in pyproject.toml (torch<2.16); raise both together
MIDDLE_TORCH = "2.8.0"  # where many teams stay for a year: between the floor and the newest release
TORCH_PYTHONS = ["3.11", "3.12", "3.13"]
TORCH_FREE_PYTHONS = ["3.10", "3.11", "3.12", "3.13"]

# (python, torch, runs in CI): CI takes the newest pair; `make matrix` runs them all.
FULL_MATRIX = [
    ("3.11", OLDEST_TORCH, False),
    ("3.11", MIDDLE_TORCH, False),
    ("3.11", NEWEST_TORCH, False),
    ("3.12", NEWEST_TORCH, False),
    ("3.13", NEWEST_TORCH, True),
]

nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True
nox.options.sessions = ["full", "torch_free"]



def _expose_pyenv_interpreters(versions: list[str]) -> None:
    """pyenv installs every version but its shims answer only for the active one: put the bin
    folder of each installed version we need on PATH, so nox finds python3.10 ... python3.13."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for version in versions:
        found = shutil.which(f"python{version}")
        if found and subprocess.run([found, "-c", ""], capture_output=True, check=False).returncode == 0:
            continue
        for candidate in sorted(root.glob(f"{version}.*/bin"), reverse=True):
            if (candidate / f"python{version}").exists():
                os.environ["PATH"] = f"{candidate}{os.pathsep}{os.environ['PATH']}"
                break


_expose_pyenv_interpreters(TORCH_FREE_PYTHONS)

NO_CAP = {"PIP_CONSTRAINT": "/dev/null"}
WARM_NUMBA = (
    "from dynascope.trace import memory, oplines; from dynascope.analyze.read import _scan; "
    "oplines.warm_up(); _scan.warm_up(); memory.warm_up()"
)
LINTERS = ("ruff", "mypy", "import-linter")  # `make lint` runs them once; the sessions only test


def _requirements_without_torch() -> list[str]:
    """The runtime and dev requirements from pyproject.toml, torch and the linters left out."""
    project = tomllib.loads(Path("pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["dev"]
    return [req for req in wanted if not req.replace(" ", "").startswith(("torch", *LINTERS))]


def _pytest(session: nox.Session, *args: str) -> None:
    session.run("python", "-m", "pytest", "-n", "2", "-q", *args, *session.posargs)


@nox.session
@nox.parametrize(
    "python,torch",
    [nox.param(py, t, id=f"{py}-torch{t}", tags=["ci"] if ci else []) for py, t, ci in FULL_MATRIX],
)
def full(session: nox.Session, torch: str) -> None:
    """The whole default test suite on one torch release."""
    session.install("--upgrade", "pip", env=NO_CAP)
    session.install(f"torch=={torch}", env=NO_CAP)
    session.install(".[dev]", env=NO_CAP)  # torch already satisfies the range: nothing newer is pulled
    session.run("python", "-c", WARM_NUMBA)
    session.run(
        "python", "-c", "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])"
    )
    _pytest(session)


@nox.session
@nox.parametrize(
    "python",
    # CI runs the oldest and the newest Python; 3.11 and 3.12 run in `make matrix` (make test covers 3.11 with torch)
    [nox.param(py, id=py, tags=["ci"] if py in (TORCH_FREE_PYTHONS[0], TORCH_FREE_PYTHONS[-1]) else [])
     for py in TORCH_FREE_PYTHONS],
)
def torch_free(session: nox.Session) -> None:
    """Decompiler, analysis and rendering without torch, and the decompiler's stdlib round trip."""
    session.install("--upgrade", "pip")
    session.install(*_requirements_without_torch())
    session.install("--no-deps", ".")
    session.run("python", "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is not None)")
    session.run("python", "-c", WARM_NUMBA)
    _pytest(session)
    # Every function decompiles on every Python: a refusal (shown as dis, never wrong code) fails
    # the session, and so does a suite doing worse with decompiled code.
    session.run("python", "tests/decompiler/stdlib_roundtrip.py")
