"""CPython's own test suites, run against decompiled-and-recompiled stdlib modules (stdlib_roundtrip.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

RUNNER = Path(__file__).resolve().parent / "stdlib_roundtrip.py"
PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"


def _interpreters() -> list:
    """This interpreter, plus the other CPythons 3.10-3.13 that pyenv has (each has the `test` package)."""
    found = {f"{sys.version_info[0]}.{sys.version_info[1]}": sys.executable}
    for version in ("3.10", "3.11", "3.12", "3.13"):
        candidates = sorted(PYENV.glob(f"{version}.*/bin/python"))
        if version not in found and candidates:
            found[version] = str(candidates[-1])
    return sorted(found.items())


@pytest.mark.slow
@pytest.mark.parametrize(("version", "python"), _interpreters(), ids=[v for v, _ in _interpreters()])
def test_stdlib_suites_pass_with_decompiled_functions(version, python, tmp_path):
    if subprocess.run([python, "-c", "import test.support"], capture_output=True, check=False).returncode:
        pytest.skip(f"{python} has no `test` package")
    out = tmp_path / "roundtrip.json"
    proc = subprocess.run([python, str(RUNNER), "--json", str(out)], capture_output=True, check=False, text=True, timeout=900)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["python"].startswith(version)
    assert proc.returncode == 0, proc.stdout[-6000:]
