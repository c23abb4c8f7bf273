"""`dynascope run` in a job of many ranks (docs/ranks.md, "Launching").

A process is a rank when its launcher says so: RANK (torchrun, torch.distributed.launch, most others),
else OMPI_COMM_WORLD_RANK (Open MPI), PMI_RANK (MPICH, Intel MPI), SLURM_PROCID (srun); the world size
likewise. Each rank writes `OUT/<stem>-rank<R>-<pid>.pfw.gz` and `OUT/rank<R>/explanation.json`, and
removes only its own rank's stale files. The job's report is written once: by the outer `dynascope run`
when it started the launcher itself, else by the last rank to finish (each rank drops a marker in
`OUT/.ranks/` when its files are complete; the rank that sees every rank's marker claims the report with an
O_EXCL file, so two ranks finishing together cannot both write it).

`dynascope run ... torchrun ARGS` (or `python -m torch.distributed.run ARGS`) rewrites the launcher's
command so that each child runs under `python -m dynascope run` with the same options.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import sys
from dataclasses import dataclass

import orjson

from dynascope.errors import ConfigError

RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
SIZE_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")
# set by an outer `dynascope run` that started the launcher: it writes the job report itself
OUTER_VAR = "DYNASCOPE_JOB_REPORT_BY"
MARKERS = ".ranks"


@dataclass(frozen=True)
class Rank:
    rank: int
    world_size: int


def _first_int(names: tuple[str, ...]) -> int | None:
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            try:
                return int(value)
            except ValueError:
                return None
    return None


def this_rank() -> Rank | None:
    """The launcher's rank and world size for this process; None for a single process."""
    rank = _first_int(RANK_VARS)
    if rank is None or rank < 0:
        return None
    size = _first_int(SIZE_VARS)
    return Rank(rank, size if size and size > rank else rank + 1)


def rank_stem(stem: str, rank: Rank | None) -> str:
    return stem if rank is None else f"{stem}-rank{rank.rank}"


def rank_dir(out_dir: str, rank: Rank) -> str:
    return os.path.join(out_dir, f"rank{rank.rank}")


def _remove(path: str) -> None:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.remove(path)
    except FileNotFoundError:
        pass


def remove_stale(out_dir: str, stem: str, rank: Rank) -> None:
    """This rank's files from an earlier run; rank 0 also those of ranks beyond this job's world size and
    a single process's traces. Never a file of another rank of this job."""
    escaped = glob.escape(out_dir)
    for path in glob.glob(os.path.join(escaped, f"{glob.escape(stem)}-rank{rank.rank}-*.pfw*")):
        _remove(path)
    _remove(os.path.join(out_dir, f"rank{rank.rank}"))
    _remove(os.path.join(out_dir, MARKERS, f"rank{rank.rank}.done"))
    if rank.rank != 0:
        return
    rank_file = re.compile(rf"{re.escape(stem)}-rank(\d+)-\d+\.pfw(\.gz)?$")
    single_file = re.compile(rf"{re.escape(stem)}-\d+\.pfw(\.gz)?$")
    for name in os.listdir(out_dir):
        m = rank_file.match(name)
        if (m and int(m.group(1)) >= rank.world_size) or single_file.match(name):
            _remove(os.path.join(out_dir, name))
        d = re.fullmatch(r"rank(\d+)", name)
        if d and int(d.group(1)) >= rank.world_size and os.path.isdir(os.path.join(out_dir, name)):
            _remove(os.path.join(out_dir, name))
    for name in ("report.html", "explanation.json", "compile_profile.json"):  # a single process's, or the job's
        _remove(os.path.join(out_dir, name))
    markers = os.path.join(out_dir, MARKERS)
    for path in glob.glob(os.path.join(glob.escape(markers), "*.done")):
        m = re.search(r"rank(\d+)\.done$", path)
        if m and int(m.group(1)) >= rank.world_size:
            _remove(path)
    for path in glob.glob(os.path.join(glob.escape(markers), "report-*")):
        _remove(path)  # no rank can claim the report before rank 0's own marker exists


def job_key() -> str:
    """What tells this job from an earlier one writing into the same directory."""
    parts = [os.environ.get(v, "") for v in ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID",
                                             "OMPI_COMM_WORLD_JOBID", "PMIX_NAMESPACE", "MASTER_ADDR",
                                             "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT")]  # fmt: skip
    return hashlib.sha1("\0".join(parts).encode()).hexdigest()[:16]


def rank_traces(out_dir: str, stem: str) -> list[str]:
    """Every rank's trace files in `out_dir` (DataLoader workers' included), by rank, then name."""
    pattern = re.compile(rf"{re.escape(stem)}-rank(\d+)-\d+\.pfw(\.gz)?$")
    found = []
    for name in os.listdir(out_dir):
        m = pattern.match(name)
        if m:
            found.append((int(m.group(1)), name))
    return [os.path.join(out_dir, name) for _, name in sorted(found)]


def mark_done(out_dir: str, rank: Rank, info: dict) -> bool:
    """Say this rank's files are complete; True when this rank is the one to write the job report (every
    rank's marker is there and this rank claimed the report first)."""
    markers = os.path.join(out_dir, MARKERS)
    os.makedirs(markers, exist_ok=True)
    key = job_key()
    mine = os.path.join(markers, f"rank{rank.rank}.done")
    tmp = f"{mine}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(orjson.dumps({**info, "rank": rank.rank, "world_size": rank.world_size, "job": key}))
    os.replace(tmp, mine)  # whole or absent: a rank reading it never sees half
    for r in range(rank.world_size):
        try:
            with open(os.path.join(markers, f"rank{r}.done"), "rb") as fh:
                if orjson.loads(fh.read()).get("job") != key:
                    return False
        except (OSError, orjson.JSONDecodeError):
            return False
    try:
        fd = os.open(os.path.join(markers, f"report-{key}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    os.write(fd, str(rank.rank).encode())
    os.close(fd)
    return True


# -- `dynascope run ... torchrun ...` -----------------------------------------------------------------

_LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")


def launcher_args(script: str, args: list[str]) -> list[str] | None:
    """The launcher's own arguments and the rest when `script args` starts a torch launcher, else None."""
    base = os.path.basename(script)
    if base == "torchrun" or re.fullmatch(r"torchrun(-script\.py)?", base):
        return list(args)
    if re.fullmatch(r"python[0-9.]*", base) or os.path.abspath(script) == os.path.abspath(sys.executable):
        if len(args) >= 2 and args[0] == "-m" and args[1] in _LAUNCHER_MODULES:
            return list(args[2:])
        if len(args) >= 1 and args[0].startswith("-m") and args[0][2:] in _LAUNCHER_MODULES:
            return list(args[1:])
    return None


@dataclass
class Launch:
    command: list[str]  # the launcher's command, each child under `python -m dynascope run`
    stem: str  # the training script's name, as its ranks' files are called
    nproc: str


def rewrite_launch(launcher: list[str], ours: list[str]) -> Launch:
    """The launcher's command (its arguments `launcher`) with the training script run under
    `python -m dynascope run OURS`. Its own options are read with torch.distributed.run's parser."""
    from dynascope import _torch

    parser = _torch.launcher_parser()
    try:
        ns = parser.parse_args(launcher)
    except SystemExit:
        raise ConfigError(
            "could not read the launcher's arguments; give them as for torchrun: "
            "dynascope run --out DIR torchrun --nproc_per_node=N train.py [args]"
        ) from None
    script, script_args = ns.training_script, list(ns.training_script_args)
    own = launcher[: len(launcher) - 1 - len(script_args)]
    if getattr(ns, "no_python", False) and not script.endswith(".py"):
        raise ConfigError(f"the launcher runs {script} with --no-python: dynascope can trace a Python script "
                          "or module only; give the training script (train.py, or -m module)")  # fmt: skip
    module = bool(getattr(ns, "module", False))
    own = [a for a in own if a not in ("-m", "--module", "--no-python", "--no_python")]
    target = ["-m", script] if module else [os.path.abspath(script) if os.path.exists(script) else script]
    command = [sys.executable, "-m", "torch.distributed.run", *own, "-m", "dynascope", "run", *ours, *target,
               *script_args]  # fmt: skip
    stem = script.rsplit(".", 1)[-1] if module else (os.path.splitext(os.path.basename(script))[0] or "trace")
    return Launch(command, stem, str(ns.nproc_per_node))
