"""The per-thread buffers keep what they record out of the garbage collector's way."""

import gc

from support import tracecheck

import dynascope
from dynascope.trace.buffers import emit, now_ns


def test_recorded_events_leave_nothing_for_the_collector_to_track(tmp_path):
    """Records wait up to a flush interval for the writer; as tuples they would survive into the old
    generations and set off full collections, which walk the program's whole heap."""
    from dynascope.trace import oplines

    oplines.warm_up()  # what the writer thread imports as it starts is no part of this
    session = dynascope.session(str(tmp_path / "t.pfw"), flush_interval_s=1000)  # nothing drained meanwhile
    gc.collect()
    before = len(gc.get_objects())
    for i in range(20_000):
        with dynascope.region("step", step=i):
            emit(("P", "read", "POSIX", now_ns(), now_ns(), {"ret": i}))
    grown = len(gc.get_objects()) - before
    session.finalize()
    assert grown < 1000, grown  # 40,000 records held: as tuples, 40,000 and more
    events = [e for e in tracecheck.load(session.path) if e.get("ph") == "X"]
    # the records emitted here (a real file read, such as an import's, names its file: fhash)
    reads = [e for e in events if e["name"] == "read" and "fhash" not in e["args"]]
    assert sum(e["name"] == "step" for e in events) == len(reads) == 20_000
    assert [e["args"]["ret"] for e in reads] == list(range(20_000))
