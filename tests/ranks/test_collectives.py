"""Collective events (capture/collectives.py) from real 2-rank runs: torchrun, gloo, CPU, aot_eager."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import torch
from support import procs, tracecheck

from ranks.launch import program, torchrun

PROGRAM = program("collectives.py")


def _run(out: Path, *args: str, nproc: int = 2) -> None:
    out.mkdir(parents=True, exist_ok=True)
    done = torchrun([PROGRAM, str(out), *args], nproc=nproc, cwd=out, timeout=240)
    if done.returncode != 0 and _aborted_at_exit(done.stderr, out, nproc, traced="--trace" in args):
        return  # torch's own exit-time abort, after the program's results (and traces) were written
    assert done.returncode == 0, done.stderr[-4000:]


def _aborted_at_exit(stderr: str, out: Path, nproc: int, traced: bool) -> bool:
    """The program sometimes dies of SIGABRT after its last line under load: "terminate called without an
    active exception" in a gloo thread's teardown (a Python comm hook; seen untraced on torch 2.15 with
    Python 3.13, about 1 run in 20 in CI, and traced on torch 2.13 with Python 3.11). Its results are
    complete by then, so a run that wrote every rank's parameters (and, traced, every rank's trace, which
    the tests then read whole: a torn one fails them) is kept."""
    written = all((out / f"params-rank{rank}.pt").is_file() for rank in range(nproc))
    if traced:
        written = written and all(list(out.glob(f"trace-rank{rank}*.pfw*")) for rank in range(nproc))
    return written and "terminate called without an active exception" in stderr


def _comm(out: Path) -> dict[int, list[dict]]:
    """rank -> its comm events (trace invariants checked), in file order."""
    by_rank: dict[int, list[dict]] = {}
    for rank in (0, 1):
        (path,) = sorted(out.glob(f"trace-rank{rank}*.pfw*"))
        index = tracecheck.check(tracecheck.load(str(path)))
        by_rank[rank] = [e for e in index["events"] if e["cat"] == "comm"]
    return by_rank


def _done(events: list[dict]) -> list[dict]:
    return [e for e in events if e["args"]["state"] == "done"]


def _markers_match(events: list[dict]) -> None:
    """Every complete event has its issue marker: same name, start, pg and seq, dur 0, written before it."""
    markers = {(e["name"], e["ts"], e["args"]["pg"]): e for e in events if e["args"]["state"] == "issued"}
    for done in _done(events):
        marker = markers.pop((done["name"], done["ts"], done["args"]["pg"]))
        assert marker["dur"] == 0 and marker["id"] < done["id"]
        # the marker's seq is the number the collective is about to take; gloo runs batch_isend_irecv as
        # one number per op, and its complete event has the last
        same = ("state", "p_idx", "level") + (("seq",) if done["name"] == "batch_isend_irecv" else ())
        assert {k: v for k, v in marker["args"].items() if k not in same} == {
            k: v for k, v in done["args"].items() if k not in same
        }
    assert not markers, f"issued and never completed: {markers}"


def test_explicit_collectives_once_per_rank_linked_by_group_and_sequence(tmp_path):
    _run(tmp_path, "--trace", "--explicit")
    comm = _comm(tmp_path)
    world = 2
    expected = {  # name -> (bytes on rank 0, on rank 1, async)
        "all_reduce": None,  # two of them, below
        "all_gather_into_tensor": (128, 128, 0),
        "reduce_scatter_tensor": (64 * world, 64 * world, 0),
        "broadcast": (32, 32, 0),
        "barrier": (0, 0, 0),
        "all_to_all_single": (16 * world, 16 * world, 0),
    }
    keys = {}
    for rank, events in comm.items():
        _markers_match(events)
        done = _done(events)
        names = Counter(e["name"] for e in done)
        p2p = ("send", "irecv") if rank == 0 else ("recv", "isend")
        assert names == Counter(
            {"all_reduce": 2, **{n: 1 for n in expected if n != "all_reduce"}, p2p[0]: 1, p2p[1]: 1}
            | {"batch_isend_irecv": 1}
        )
        (batch,) = [e for e in done if e["name"] == "batch_isend_irecv"]
        assert (batch["args"]["bytes"], batch["args"]["async"]) == (48, 1)
        for e in done:
            args = e["args"]
            assert args["source"] == "explicit" and args["group_size"] == world and args["pg"] == "0"
            assert args["seq"] > 0 and e["dur"] >= 0
            if e["name"] in expected and expected[e["name"]]:
                assert (args["bytes"], args["async"]) == (expected[e["name"]][rank], expected[e["name"]][2]), e
        reduces = sorted(
            (e["args"]["seq"], e["args"]["bytes"], e["args"]["async"]) for e in done if e["name"] == "all_reduce"
        )
        assert [r[1:] for r in reduces] == [(1024, 0), (256, 1)]
        assert {e["args"]["bytes"] for e in done if e["name"] in p2p} == {40, 80}
        assert {e["args"]["async"] for e in done if e["name"] in ("isend", "irecv")} == {1}
        keys[rank] = sorted(
            (e["args"]["pg"], e["args"]["seq"], e["name"] if e["name"] not in p2p else "p2p") for e in done
        )  # batch_isend_irecv included: its last op's number is the same on both ranks
        assert len({k[:2] for k in keys[rank]}) == len(keys[rank]), "a (pg, seq) twice on one rank"
    assert keys[0] == keys[1]  # the same collective has the same (group, sequence number) on every rank


def _params(path: Path) -> dict:
    return torch.load(path)


def test_ddp_buckets_a_comm_hook_and_compiled_collectives_change_nothing(tmp_path):
    """DDP with the program's own comm hook, and a compiled function of collectives, traced and untraced."""
    traced, plain = tmp_path / "traced", tmp_path / "plain"
    steps = 3
    _run(traced, "--trace", "--ddp", str(steps), "--compiled", "--user-hook")
    _run(plain, "--ddp", str(steps), "--compiled", "--user-hook")
    hook_calls = {}
    for rank in (0, 1):  # the trained parameters are bitwise those of the untraced run
        a, b = _params(traced / f"params-rank{rank}.pt"), _params(plain / f"params-rank{rank}.pt")
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
        # the program's hook still ran, as often as untraced: once per bucket per step, each call seen
        hook_calls[rank] = int((traced / f"hook-rank{rank}.txt").read_text())
        assert hook_calls[rank] == int((plain / f"hook-rank{rank}.txt").read_text()) and hook_calls[rank] >= steps
        # Dynamo made the same graphs and breaks of the compiled model and of the function with collectives
        counted, untraced = (json.loads((d / f"dynamo-rank{rank}.json").read_text()) for d in (traced, plain))
        if not hasattr(torch._dynamo.eval_frame, "set_code_exec_strategy"):
            # before 2.6 Dynamo can skip the wrapper's frame but not the frames it calls: it looks at more
            # frames (and compiles nothing in them)
            assert counted.pop("frames") >= untraced.pop("frames")
        assert counted == untraced
    comm = _comm(traced)
    param_names = set(_params(plain / "params-rank0.pt"))
    total_bytes = sum(t.nbytes for t in _params(plain / "params-rank0.pt").values())
    per_rank = {}
    for rank, events in comm.items():
        _markers_match(events)
        buckets = sorted((e for e in _done(events) if e["args"]["source"] == "ddp"), key=lambda e: e["args"]["seq"])
        assert buckets and all(e["name"] == "all_reduce" and e["args"]["async"] == 1 for e in buckets)
        assert len(buckets) == hook_calls[rank] and all(e["args"]["params"] >= 1 for e in buckets)
        # one event per bucket per step: DDP's first step has one bucket per its initial layout, its later
        # steps the rebuilt layout (several buckets at --bucket-cap-mb 1 for this 3 MB model)
        steps_seen = [[]]
        for e in buckets:
            if e["args"]["bucket"] == 0 and steps_seen[-1]:
                steps_seen.append([])
            steps_seen[-1].append(e)
        assert len(steps_seen) == steps
        layouts = [
            sorted((e["args"]["bucket"], e["args"]["params"], e["args"]["bytes"]) for e in s) for s in steps_seen
        ]
        assert len(layouts[1]) >= 3 and layouts[1:] == [layouts[1]] * (steps - 1)
        for layout in layouts:
            assert [b[0] for b in layout] == list(range(len(layout)))
            assert sum(b[1] for b in layout) == len(param_names) and sum(b[2] for b in layout) == total_bytes
        for e in buckets:
            first, last = e["args"]["layers"].split("..")
            assert {first, last} <= param_names, e["args"]["layers"]
        per_rank[rank] = [(e["args"]["pg"], e["args"]["seq"], e["args"]["bucket"], e["args"]["bytes"]) for e in buckets]
        # the compiled function's dist.all_reduce is a functional collective in its graph (not an event here);
        # the broadcast after its graph break runs eagerly, an explicit event per call
        assert Counter(e["name"] for e in _done(events) if e["args"]["source"] == "explicit") == {"broadcast": 2}
    assert per_rank[0] == per_rank[1]


@pytest.mark.slow
def test_ddp_three_ranks_bitwise_as_untraced(tmp_path):
    """3 ranks: DDP scales gradients by 1/3, which rounds; dynascope's hook rounds the same way."""
    traced, plain = tmp_path / "traced", tmp_path / "plain"
    _run(traced, "--trace", "--ddp", "3", nproc=3)
    _run(plain, "--ddp", "3", nproc=3)
    for rank in (0, 1, 2):
        a, b = _params(traced / f"params-rank{rank}.pt"), _params(plain / f"params-rank{rank}.pt")
        assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_builtin_comm_hook_is_dispatched_to(tmp_path):
    traced, plain = tmp_path / "traced", tmp_path / "plain"
    _run(traced, "--trace", "--ddp", "2", "--builtin-hook")
    _run(plain, "--ddp", "2", "--builtin-hook")
    for rank in (0, 1):
        a, b = _params(traced / f"params-rank{rank}.pt"), _params(plain / f"params-rank{rank}.pt")
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert all(any(e["args"]["source"] == "ddp" for e in _done(ev)) for ev in _comm(traced).values())


def test_in_flight_names_a_blocked_collective_until_it_returns(tmp_path):
    """The registry the cut record reads: a collective is in flight from its issue to its completion."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    import dynascope
    from dynascope.capture import collectives

    seen = []

    def blocking_all_reduce(tensor, op=None, group=None, async_op=False):
        seen.append(collectives.in_flight())  # what a SIGTERM arriving now would write

    wrapped = collectives._wrap(blocking_all_reduce, "all_reduce", "tensor", False)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        with dynascope.session(str(tmp_path / "t.pfw")) as session:
            wrapped(torch.ones(16))
            after = collectives.in_flight()
            start_us = session.offset_ns // 1000
    finally:
        dist.destroy_process_group()
    (pending,) = seen[0]
    assert {k: pending[k] for k in ("op", "pg", "seq", "bytes", "source")} == {
        "op": "all_reduce", "pg": "0", "seq": -1, "bytes": 64, "source": "explicit"}  # fmt: skip
    assert pending["issued_us"] > start_us and after == []


@pytest.mark.skipif(tuple(map(int, torch.__version__.split(".")[:2])) < (2, 6), reason="FSDP2 on torch 2.5.1 needs CUDA ('FSDP requires CUDA for "
                    "streams'); 2.13 and 2.15 run it on CPU")  # fmt: skip
def test_fsdp2_collectives_are_fsdp_events(tmp_path):
    _run(tmp_path, "--trace", "--fsdp", "2")
    for events in _comm(tmp_path).values():
        fsdp = Counter(e["name"] for e in _done(events) if e["args"]["source"] == "fsdp")
        assert fsdp["all_gather_into_tensor"] >= 2 and fsdp["reduce_scatter_tensor"] >= 2, fsdp


def test_sigterm_while_blocked_names_the_collective_in_the_cut_record(tmp_path):
    """A rank stopped while it waits in a barrier: its file ends with the cut record, whose `pending` names
    the barrier (from in_flight()), and the barrier's issue marker has no complete event."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time

    from ranks.launch import ranks_env

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ranks = []
    for rank in (0, 1):
        env = ranks_env(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                        MASTER_PORT=str(port))  # fmt: skip
        ranks.append(procs.popen([sys.executable, PROGRAM, str(tmp_path), "--trace", "--block"], env=env,
                                      cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "blocked").exists():
            assert time.monotonic() < deadline and ranks[1].poll() is None, ranks[1].communicate()[0][-3000:]
            time.sleep(0.2)
        time.sleep(1.0)  # into the barrier
        ranks[1].send_signal(signal.SIGTERM)
        ranks[1].wait(timeout=30)
        assert ranks[1].returncode == -signal.SIGTERM
    finally:
        for proc in ranks:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
    (path,) = sorted(tmp_path.glob("trace-rank1*.pfw*"))
    records = tracecheck.load(str(path))
    events = [r for r in records if r.get("ph") == "X"]
    (cut,) = [e for e in events if e["name"] == "cut"]
    pending = cut["args"]["pending"]
    assert [(p["op"], p["pg"], p["seq"], p["bytes"], p["source"]) for p in pending] == [
        ("barrier", "0", 2, 0, "explicit")
    ]
    comm = [e for e in events if e["cat"] == "comm"]
    assert [(e["name"], e["args"]["state"]) for e in comm] == [
        ("all_reduce", "issued"), ("all_reduce", "done"), ("barrier", "issued")]  # fmt: skip
    assert pending[0]["issued_us"] == comm[-1]["ts"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("backend", "wrap"), [("inductor", "inside"), ("aot_eager", "outside"), ("inductor", "outside")]
)
def test_ddp_buckets_other_backends_and_wraps(tmp_path, backend, wrap):
    traced, plain = tmp_path / "traced", tmp_path / "plain"
    flags = ["--ddp", "3", "--backend", backend, "--wrap", wrap]
    _run(traced, "--trace", *flags)
    _run(plain, *flags)
    for rank in (0, 1):
        a, b = _params(traced / f"params-rank{rank}.pt"), _params(plain / f"params-rank{rank}.pt")
        assert all(torch.equal(a[k], b[k]) for k in a)
    keys = {}
    for rank, events in _comm(traced).items():
        _markers_match(events)
        buckets = [e for e in _done(events) if e["args"]["source"] == "ddp"]
        assert len(buckets) >= 3 + 2 * 3 and {e["args"]["bucket"] for e in buckets} == set(range(4))
        keys[rank] = sorted((e["args"]["seq"], e["args"]["bucket"], e["args"]["bytes"]) for e in buckets)
    assert keys[0] == keys[1]


def test_ddp_hook_registration_in_one_process(tmp_path):
    """dynascope's hook is on a DDP made while tracing, not on one whose Python reducer (compiled
    autograd) reduces; a program's hook is taken once, a second registration fails as DDP's own would."""
    import socket

    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    import dynascope

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        with dynascope.session(str(tmp_path / "t.pfw")):
            ddp = DDP(torch.nn.Linear(4, 4))
            assert ddp.__dict__.get("_dynascope_bucket_hook") is not None
            ddp.register_comm_hook(None, default_hooks.allreduce_hook)
            with pytest.raises(RuntimeError, match="can only be called once"):
                ddp.register_comm_hook(None, default_hooks.allreduce_hook)
            ddp(torch.ones(2, 4)).sum().backward()
            with torch._dynamo.config.patch(optimize_ddp="python_reducer"):  # (monkeypatch's undo hides it)
                assert DDP(torch.nn.Linear(4, 4)).__dict__.get("_dynascope_bucket_hook") is None
        untraced = DDP(torch.nn.Linear(4, 4))
        assert untraced.__dict__.get("_dynascope_bucket_hook") is None
    finally:
        dist.destroy_process_group()
    events = [e for e in tracecheck.load(str(next(tmp_path.glob("t*.pfw")))) if e.get("cat") == "comm"]
    assert [(e["args"]["source"], e["args"]["bucket"], e["args"]["state"]) for e in events] == [
        ("ddp", 0, "issued"), ("ddp", 0, "done")]  # fmt: skip


def test_process_groups_made_while_tracing_live_until_the_session_ends(tmp_path):
    """The hang at exit (a group's destructor joining a Gloo thread that waits for the GIL to destroy a
    collective event's callback) is avoided by holding the groups until the session ends: made while
    tracing, a group outlives the program's own references and dies at uninstall."""
    import gc
    import weakref

    import torch.distributed as dist

    import dynascope
    from dynascope.capture import collectives

    with dynascope.session(str(tmp_path / "t.pfw")):
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        group = weakref.ref(dist.group.WORLD)
        dist.all_reduce(torch.ones(4), async_op=True).wait()
        dist.destroy_process_group()
        gc.collect()
        assert group() is not None and collectives.installed()
    gc.collect()
    assert group() is None
