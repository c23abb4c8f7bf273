"""Summarise many per-rank trace files on a Dask cluster.

Each task reads one file and pre-aggregates it with exactly the code of the single-machine path
(`fastpath.file_partial`); the client merges the small partials and finishes, so the result is
identical to `summarize(read_trace(files))`. Dask is imported only when this path is used.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings

from dynascope.analyze.fastpath import file_partial
from dynascope.analyze.finish import finish
from dynascope.analyze.partial import merge
from dynascope.analyze.read.paths import expand_paths
from dynascope.analyze.read.readinfo import TraceWarning
from dynascope.analyze.summary import Summary
from dynascope.artifacts.explanation import Report
from dynascope.errors import ConfigError

__all__ = ["summarize_files_dask"]


def summarize_files_dask(
    paths, top: int = 20, scheduler: str | None = None, workers: int | None = None, processes: bool = False,
    explanation: Report | None = None, library_frames: bool = False,
) -> Summary:
    """Read and pre-aggregate each file as one Dask task, on `scheduler` (an address such as
    tcp://host:8786) or on a local cluster of `workers` workers (threads by default). `explanation`: as
    for `summarize_files`, already read."""
    try:
        from distributed import Client, LocalCluster
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigError(f"Dask is not installed: pip install 'dynascope[dask]' ({exc})") from None
    if workers is not None and workers < 1:
        raise ConfigError(f"workers must be at least 1 (got {workers})")
    files = [os.fspath(p) for p in expand_paths(paths)]
    with _quiet_distributed():
        partials = _run(files, scheduler, workers, processes, Client, LocalCluster)
    result = finish(merge(partials), top=top, explanation=explanation, library_frames=library_frames)
    for msg in result.meta["warnings"]:
        warnings.warn(msg, TraceWarning, stacklevel=2)
    return result


@contextlib.contextmanager
def _quiet_distributed():
    """distributed logs INFO to stderr, including harmless tracebacks when an in-process cluster
    closes; a summary command should print its summary, not those."""
    logger = logging.getLogger("distributed")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _run(files, scheduler, workers, processes, Client, LocalCluster) -> list:
    cluster = None
    if scheduler is not None:
        client = Client(scheduler)
    else:
        cluster = LocalCluster(
            n_workers=workers or 1,
            threads_per_worker=1,
            processes=processes,
            dashboard_address=None,
            silence_logs=40,
        )
        client = Client(cluster)
    try:
        futures = client.map(file_partial, files, pure=False)
        return client.gather(futures)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
