"""The decoder on hand-made raw streams: cut calls, truncated calls, unknown graphs, regions."""

import json

from dynascope.trace.buffers import MARK
from dynascope.trace.decode import Decoder, ThreadStream
from dynascope.trace.ops import TABLE, OpSpec


def graph_with(n_ops: int) -> int:
    ops = [OpSpec.make(f"function.op{i}", "dynamo", True, {"kind": "op", "node": f"op{i}"}) for i in range(n_ops)]
    return TABLE.register_graph(OpSpec.make("g.forward", "dynamo.graph", True, {"kind": "graph", "n_ops": n_ops}), ops)


def events(decoder, stream, *chunks, final=True):
    """Decode chunks written as the hot path writes them: tuples go to a side list, MARK - n in their place."""
    lines = []
    numbers: list[int] = []
    for i, chunk in enumerate(chunks):
        side, ints = [], []
        for record in chunk:
            if isinstance(record, tuple):
                numbers.append(len(numbers) + 1)
                side.append((numbers[-1], record))
                ints.append(MARK - numbers[-1])
            else:
                ints.append(record)

        def take(last, side=side):
            taken = [entry for entry in side if entry[0] <= last]
            del side[: len(taken)]
            return taken

        decoder.decode(stream, ints, take, final and i == len(chunks) - 1, lambda data: lines.append(bytes(data)))
    records = [json.loads(line) for piece in lines for line in piece.splitlines()]
    return [r for r in records if r["ph"] == "X"]


def test_a_call_cut_by_a_drain_is_joined_and_a_truncated_call_keeps_its_ops():
    gid = graph_with(3)
    decoder = Decoder(pid=1, hhash="0" * 16, offset_ns=0, inline_args=False)
    stream = ThreadStream(tid=1)
    first = [-gid, 1000, 2000]  # the drain cut this call after its first op
    second = [3000, 5000, -gid, 10000, 11000]  # its last two ops, then a call that raised after one op
    got = events(decoder, stream, first, second)
    names = [e["name"] for e in got]
    assert names == ["g.forward", "function.op0", "function.op1", "function.op2", "g.forward", "function.op0"]
    assert [(e["ts"], e["dur"]) for e in got[:4]] == [(1, 4), (1, 1), (2, 1), (3, 2)]
    assert [e["id"] - e["args"]["p_idx"] - 1 for e in got[1:4]] == [0, 1, 2]  # op index from ids
    assert decoder.dropped == 0


def test_unknown_graphs_and_stray_readings_are_dropped_not_fatal():
    decoder = Decoder(pid=1, hhash="0" * 16, offset_ns=0, inline_args=False)
    got = events(decoder, ThreadStream(tid=1), [5, 6, -999_999, 1000, 2000])
    assert got == [] and decoder.dropped == 4  # two readings before any call, both of the unknown graph


def test_regions_wrap_graph_calls_and_are_closed_at_the_end():
    gid = graph_with(1)
    decoder = Decoder(pid=1, hhash="0" * 16, offset_ns=0, inline_args=False)
    chunk = [("B", "epoch", "region", {"epoch": 0}, 0), ("B", "step", "region", {"step": 1}, 500),
             -gid, 1000, 3000, ("E", 4000)]  # fmt: skip
    got = {e["name"]: e for e in events(decoder, ThreadStream(tid=1), chunk)}
    assert got["step"]["args"]["p_idx"] == got["epoch"]["id"] and got["step"]["dur"] == 4
    assert got["g.forward"]["args"]["p_idx"] == got["step"]["id"] and got["g.forward"]["args"]["level"] == 3
    assert got["epoch"]["dur"] > 0  # closed at the end of the trace, not lost


def test_a_side_record_whose_mark_was_interrupted_costs_only_itself():
    gid = graph_with(1)
    decoder = Decoder(pid=1, hhash="0" * 16, offset_ns=0, inline_args=False)
    side = [(1, ("B", "step", "region", {"step": 0}, 0)), (2, ("E", 9000)),  # 2's MARK never appended
            (3, ("B", "step", "region", {"step": 1}, 10000)), (4, ("E", 20000))]  # fmt: skip
    ints = [MARK - 1, -gid, 1000, 2000, MARK - 3, -gid, 11000, 12000, MARK - 4]

    def take(last):
        taken = [entry for entry in side if entry[0] <= last]
        del side[: len(taken)]
        return taken

    lines = []
    decoder.decode(ThreadStream(tid=1), ints, take, True, lambda data: lines.append(bytes(data)))
    records = [json.loads(line) for piece in lines for line in piece.splitlines()]
    steps = sorted((r for r in records if r["name"] == "step"), key=lambda r: r["ts"])
    assert [s["args"]["step"] for s in steps] == [0, 1] and steps[1]["dur"] == 10  # step 1 intact
    assert decoder.dropped == 1


def test_compiled_formatter_writes_exact_json_and_resumes_when_its_buffer_is_full():
    import numpy as np

    from dynascope.trace import oplines

    heads = np.frombuffer(b'{"args":{"g":1{"args":{"o":2', dtype=np.uint8)  # heads end inside args
    starts = np.array([0, 14, 28], dtype=np.int64)
    table = (np.array([-1, 0]), np.array([0, 1]), np.array([0, 1]))  # graph 1: spec 0, one op (spec 1)
    big = 9_223_372_036_854_775  # ns: ts near the int64 limit once divided
    values = np.array([-1, 0, 999, -1, big, big + 12_345_678], dtype=np.int64)

    def run(buffer_size):
        out, pieces, index, next_id = np.empty(buffer_size, dtype=np.uint8), [], 0, 7
        while True:
            why, index, size, next_id, _events, _dropped = oplines.format_calls(
                values, index, *table, heads, starts, 14, -1, next_id, 0, False, out)  # fmt: skip
            pieces.append(out[:size].tobytes())
            if why != oplines.BUFFER_FULL:
                return b"".join(pieces), why, next_id

    whole, why, next_id = run(1 << 16)
    assert why == oplines.DONE and next_id == 11
    rows = [json.loads(line) for line in whole.splitlines()]
    assert rows[0] == {"args": {"g": 1, "p_idx": -1}, "id": 7, "ts": 0, "dur": 0}
    assert rows[1] == {"args": {"o": 2, "p_idx": 7}, "id": 8, "ts": 0, "dur": 0}  # 999 ns: under a microsecond
    assert rows[3] == {"args": {"o": 2, "p_idx": 9}, "id": 10, "ts": big // 1000, "dur": (big + 12_345_678) // 1000 - big // 1000}
    small, _, _ = run(2 * (14 + oplines.LINE_TAIL_MAX))  # room for one call at a time
    assert small == whole


def test_a_fork_waits_for_the_formatters_compile_so_the_child_never_inherits_a_held_compiler_lock():
    import os
    import threading

    from dynascope.trace import oplines

    compiling, releasing = threading.Event(), threading.Event()

    def compile_in_writer_thread():
        with oplines.compile_lock:  # as warm_up holds it while numba compiles
            compiling.set()
            releasing.wait(timeout=5)
            releasing.set()

    writer = threading.Thread(target=compile_in_writer_thread)
    writer.start()
    compiling.wait(timeout=5)
    threading.Timer(0.2, releasing.set).start()
    pid = os.fork()
    if pid == 0:  # the child: the lock must be free here
        os._exit(0 if oplines.compile_lock.acquire(timeout=5) else 1)
    assert releasing.is_set()  # the fork happened only after the compile let go
    _, status = os.waitpid(pid, 0)
    writer.join()
    assert os.waitstatus_to_exitcode(status) == 0
