"""Launching the many-ranks test programs under torchrun (gloo, CPU), with or without dynascope."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support import procs

PROGRAMS = Path(__file__).parent / "programs"
BIN = Path(sys.executable).parent


def program(name: str) -> str:
    return str(PROGRAMS / name)


def ranks_env(**extra: str) -> dict[str, str]:
    """The environment a launched job gets: one thread per rank (2-core machines), no stray ranks' vars."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", TORCHINDUCTOR_COMPILE_THREADS="1", **extra)
    return env


def torchrun(args: list[str], *, nproc: int = 2, cwd: str | os.PathLike | None = None, timeout: float = 300,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`torchrun --standalone --nproc_per_node=N ARGS...` (ARGS: what follows the launcher's own options)."""
    cmd = [str(BIN / "torchrun"), "--standalone", f"--nproc_per_node={nproc}", *args]
    return procs.run(cmd, cwd=cwd, env=env or ranks_env(), capture_output=True, text=True, timeout=timeout,
                          check=False)  # fmt: skip
