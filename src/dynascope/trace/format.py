"""The trace file's vocabulary, defined here once: the event categories every writer (trace/, capture/)
and reader (analyze/, render/) uses, and the byte layout of op-event and graph-call lines. The writer's
compiled formatter (oplines.py) and the decoder's line heads (decode.py) write it; analyze/read/_scan.py
matches it byte for byte. Pure constants and one function: importing this module costs nothing and
needs neither torch nor numba.

    op event:
    {"name":NAME,"cat":"dynamo","pid":P,"tid":T,"ph":"X","args":{"grad_enabled":G,"level":L,"p_idx":PARENT},"id":ID,"ts":TS,"dur":DUR}

    graph call:
    {"name":NAME,"cat":"dynamo.graph","pid":P,"tid":T,"ph":"X","args":{"hhash":"HASH","grad_enabled":G,"op":OP,"level":L,"p_idx":PARENT},"id":ID,"ts":TS,"dur":DUR}

A line is a head (static per node and thread: everything up to and including `level`), then the tail
(`p_idx`, `id`, `ts`, `dur`), then a newline. Inline attribution (DYNASCOPE_INLINE_ARGS) goes between
`grad_enabled` and `level`, which no scanner takes.
"""

from __future__ import annotations

# event categories (docs/trace-format.md): op events, graph calls, compile phases, compiled frames and
# calls, the whole step's automatic events (data loading, backward, optimizer, file I/O), collectives and
# device activity; any other category is a user region
OP_CAT = "dynamo"
GRAPH_CAT = "dynamo.graph"
COMPILE_CAT = "dynamo.compile"
FRAME_CAT = "dynamo.frame"  # a compiled frame starts or returns (an instant; trace/probes.py)
CALL_CAT = "dynamo.call"  # a call of a torch.compile'd function begins or ends
DATA_CAT = "dataloader"
AUTOGRAD_CAT = "autograd"
OPTIMIZER_CAT = "optimizer"
TORCH_IO_CAT = "torch.io"  # torch.save / torch.load
POSIX_CAT = "POSIX"  # file I/O (trace/fileio.py)
COMM_CAT = "comm"  # a collective (capture/collectives.py)
GPU_CAT = "gpu"  # what ran on a device, on its own track (trace/launches.py)
MEMORY_CAT = "memory"  # counter samples of memory in use ("ph":"C": trace/memory.py, capture/memory.py)

# the literal text before each field, in line order
NAME = '{"name":'
CAT = ',"cat":"'
PID = '","pid":'  # after the category's closing quote
TID = ',"tid":'
ARGS = ',"ph":"X","args":{'
HHASH = '"hhash":"'  # graph calls only: the host hash, 16 hex digits
HHASH_END = '",'
GRAD = '"grad_enabled":'
OP = ',"op":'  # graph calls only: the number of the graph's OH record
LEVEL = ',"level":'
# the tail
P_IDX = ',"p_idx":'
ID = '},"id":'
TS = ',"ts":'
DUR = ',"dur":'
END = "}\n"


def head(name_json: str, cat: str, pid: int, tid: int, grad_enabled: int, level: int, hhash: str | None = None,
         attribution: str = "") -> str:  # fmt: skip
    """A line's head: `hhash` for graph calls; `attribution` is `,"op":N` for a graph call, or the
    inline fields (",key:value,...")."""
    host = "" if hhash is None else f"{HHASH}{hhash}{HHASH_END}"
    return f"{NAME}{name_json}{CAT}{cat}{PID}{pid}{TID}{tid}{ARGS}{host}{GRAD}{grad_enabled}{attribution}{LEVEL}{level}"


def tail(p_idx: int, event_id: int, ts: int, dur: int) -> str:
    return f"{P_IDX}{p_idx}{ID}{event_id}{TS}{ts}{DUR}{dur}{END}"
