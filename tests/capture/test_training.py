"""The whole training step as events (capture/training.py), on real DataLoaders, optimizers and files.

Each test runs tests/capture/scripts/whole_step.py in a subprocess (DataLoader workers are real
processes), traced by `dynascope run`, by `dynascope.session()` or by the pydftracer drop-in, and
counts the events of each kind in every process's file against what the script says it did. The two
runs several tests read (two workers, with and without step events) are made once per module.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter

import pytest
from support import procs, tracecheck
from support.invariants import assert_invariants

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "whole_step.py")


def run(tmp_path, *script_args, api="run", env=None, expect_ok=True, run_options=()):
    out = tmp_path / "out"
    data = tmp_path / "data"
    args = ["--data", str(data), *script_args]
    if api == "run":
        command = [sys.executable, "-m", "dynascope.cli", "run", "--out", str(out), "--no-html", "--no-explain",
                   *run_options, SCRIPT, *args]  # fmt: skip
    else:
        command = [sys.executable, SCRIPT, *args, "--api", api, "--trace", str(out / "trace.pfw.gz")]
    full_env = {**os.environ, "DFTRACER_ENABLE": "1", **(env or {})}
    done = procs.run(command, capture_output=True, text=True, timeout=600, env=full_env, check=False)
    if expect_ok:
        assert done.returncode == 0, done.stderr[-3000:]
    said = next((json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")), None)
    files = {path: tracecheck.load(path) for path in tracecheck.trace_files(str(out))}
    if api == "run" and expect_ok:
        assert_invariants(out, done.stdout)
    return done, said, files


def events(records):
    return [r for r in records if r.get("ph") == "X" and r["name"] not in ("start", "end")]


def split(files):
    """(the main process's events, every worker's events) by who iterated the DataLoader."""
    main = [path for path, records in files.items() if any(e["name"] == "dataloader.next" for e in events(records))]
    assert len(main) == 1, list(files)
    workers = [events(records) for path, records in files.items() if path != main[0]]
    return events(files[main[0]]), workers


def named(evs, name):
    return [e for e in evs if e["name"] == name]


def check_whole_step(said, files, workers, optimizer="SGD", persistent=False):
    for records in files.values():
        tracecheck.check(records)  # every process's file is complete and well formed
    main, worker_files = split(files)
    # workers start for each pass over a loader, unless they persist (then once per loader)
    assert len(worker_files) == workers * (said["passes"] // said["epochs"] if persistent else said["passes"])
    nexts = named(main, "dataloader.next")
    assert sum(e["args"]["batch"] is not None for e in nexts) == said["batches"]
    assert len(nexts) == said["batches"] + said["passes"]  # each pass ends with the call that stops it
    for name in ("optimizer.step", "optimizer.zero_grad", "backward"):
        assert len(named(main, name)) == said["steps"], name
    assert {e["args"]["optimizer"] for e in named(main, "optimizer.step")} == {optimizer}
    everywhere = [e for evs in [main, *worker_files] for e in evs]
    loads = named(everywhere, "torch.load")
    assert len(loads) == said["samples_read"]
    assert len(named(main, "torch.save")) == said["saved"]
    assert all(e["args"]["bytes"] > 0 for e in loads + named(main, "torch.save"))
    fetches = [e for evs in worker_files for e in named(evs, "dataloader.fetch")]
    if workers:
        assert len(fetches) == said["batches"]
        assert not named(main, "torch.load")  # the workers read the samples, in their own files
        received = Counter((e["args"]["loader"], e["args"]["batch"]) for e in nexts if e["args"]["batch"] is not None)
        fetched = Counter((e["args"]["loader"], e["args"]["batch"]) for e in fetches)
        assert received == fetched  # each batch the main process waited for names the fetch that made it
    else:
        assert not fetches
    return main, worker_files


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    """`dynascope run` of the loop with two DataLoader workers, as it comes."""
    return run(tmp_path_factory.mktemp("two_workers"), "--workers", "2", env={"DFTRACER_DISABLE_IO": "0"})


@pytest.fixture(scope="module")
def no_step_events(tmp_path_factory):
    """The same run with DYNASCOPE_STEP_EVENTS=0."""
    return run(tmp_path_factory.mktemp("no_step_events"), "--workers", "2", env={"DYNASCOPE_STEP_EVENTS": "0"})


@pytest.mark.parametrize("workers", [0, 2])
def test_dynascope_run_records_data_backward_optimizer_and_files(tmp_path, workers, two_workers):
    _, said, files = two_workers if workers == 2 else run(tmp_path, "--workers", "0")
    main, _ = check_whole_step(said, files, workers)
    step = named(main, "optimizer.step")[0]
    assert step["cat"] == "optimizer" and step["args"]["opt"] == 1
    backward = named(main, "backward")[0]
    inside = [e for e in main if e["cat"] == "dynamo.graph" and e["name"].endswith(".backward")
              and backward["ts"] <= e["ts"] <= backward["ts"] + backward["dur"]]  # fmt: skip
    assert inside, "the backward graph call runs inside the backward region"


def test_spawned_persistent_workers_of_two_loaders_with_adam(tmp_path):
    # one worker per loader: each spawned worker imports torch afresh, and one shows persistence as well as two
    _, said, files = run(tmp_path, "--workers", "1", "--context", "spawn", "--persistent", "--loaders", "2",
                         "--optimizer", "adam", "--epochs", "2")  # fmt: skip
    main, worker_files = check_whole_step(said, files, workers=1, optimizer="Adam", persistent=True)
    assert len({e["args"]["loader"] for e in named(main, "dataloader.next")}) == 2
    per_worker = [len(named(evs, "dataloader.fetch")) for evs in worker_files]
    assert all(n > 0 for n in per_worker)  # the same persistent workers fetched in both epochs


@pytest.mark.parametrize("api", ["session", "dftracer"])
def test_python_api_and_drop_in_record_the_step_too(tmp_path, api):
    _, said, files = run(tmp_path, "--workers", "2", api=api)
    check_whole_step(said, files, workers=2)


@pytest.mark.parametrize("how", ["environment", "option"])
def test_step_events_can_be_turned_off(tmp_path, how, no_step_events):
    if how == "environment":
        _, _, files = no_step_events
    else:
        _, _, files = run(tmp_path, "--workers", "2", run_options=["--no-step-events"])
    cats = {e["cat"] for records in files.values() for e in events(records)}
    assert not cats & {"dataloader", "autograd", "optimizer", "torch.io"}
    assert "dynamo" in cats


def test_disable_io_removes_exactly_the_io_events(tmp_path, two_workers):
    kinds = []
    for disable in ("0", "1"):
        _, said, files = (
            two_workers if disable == "0" else run(tmp_path, "--workers", "2", env={"DFTRACER_DISABLE_IO": "1"})
        )
        kinds.append(Counter((e["cat"], e["name"]) for records in files.values() for e in events(records)
                             if e["cat"] not in ("dynamo.compile",)))  # fmt: skip
    io_cats = {"POSIX", "torch.io"}
    with_io = {kind: n for kind, n in kinds[0].items() if kind[0] not in io_cats}
    assert with_io == dict(kinds[1])  # everything else, event for event
    assert kinds[0][("torch.io", "torch.load")] == said["samples_read"]
    assert not any(kind[0] in io_cats for kind in kinds[1])


def test_a_crash_mid_epoch_leaves_every_process_file_readable(tmp_path):
    done, _, files = run(tmp_path, "--workers", "2", "--crash-at", "2", expect_ok=False)
    assert done.returncode != 0 and "planted crash at step 2" in done.stderr
    assert len(files) == 3
    for records in files.values():
        tracecheck.check(records, complete=False)
    main, worker_files = split(files)
    assert len(named(main, "optimizer.step")) == 2
    assert all(named(evs, "dataloader.fetch") for evs in worker_files)


def test_tracing_changes_nothing_the_loop_computes(two_workers, no_step_events):
    """Same data, same model, same weights with and without the step events (each run wrote its own data
    from the same seed, and its checkpoint beside it)."""
    import torch

    data_dirs = [done.args[done.args.index("--data") + 1] for done, _, _ in (two_workers, no_step_events)]
    weights = [torch.load(os.path.join(data, "checkpoint-1.pt")) for data in data_dirs]
    assert weights[0].keys() == weights[1].keys()
    for key in weights[0]:
        assert torch.equal(weights[0][key], weights[1][key]), key
