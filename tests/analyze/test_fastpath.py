"""The fast path (analyze/fastpath.py, its scanner analyze/read/_scan.py) gives exactly the general reader's summaries.

Traces are written line by line in the writer's exact layout (trace/format.py): graph calls
naming their OH record, op events that refer to attribution through their graph call
(id = p_idx + 1 + k), regions, compile events, several threads, a forked child; chunks and blocks are
made tiny so that chunk cuts fall everywhere, including between a graph call and its ops.
"""

from __future__ import annotations

import gzip
import json
import warnings

import numpy as np
import pytest
from polars.testing import assert_frame_equal
from support.trace_fixtures import GEN_A, GEN_C, GEN_C_NO_ARGS, PROFILER

import dynascope.analyze.partial as P
import dynascope.analyze.partial_build as PB
import dynascope.analyze.pipeline as S
import dynascope.analyze.read.lines as _lines
from dynascope.analyze import fastpath
from dynascope.analyze.read import _inflate, _scan

TABLES = ["by_op", "by_layer", "by_phase", "by_graph", "by_step", "by_process", "compile_vs_run", "top_ops", "by_file"]

HH = "9c1185a5c5e9fc54"


def _dumps(o) -> str:
    return json.dumps(o, separators=(",", ":"))


def _op_line(name, pid, tid, grad, level, p_idx, ident, ts, dur) -> str:
    return (
        '{"name":%s,"cat":"dynamo","pid":%d,"tid":%d,"ph":"X","args":{"grad_enabled":%d,"level":%d,"p_idx":%d},'
        '"id":%d,"ts":%d,"dur":%d}' % (json.dumps(name), pid, tid, grad, level, p_idx, ident, ts, dur)
    )


def _graph_line(name, pid, tid, grad, op, level, p_idx, ident, ts, dur) -> str:
    return (
        '{"name":%s,"cat":"dynamo.graph","pid":%d,"tid":%d,"ph":"X","args":{"hhash":"%s","grad_enabled":%d,"op":%d,'
        '"level":%d,"p_idx":%d},"id":%d,"ts":%d,"dur":%d}' % (json.dumps(name), pid, tid, HH, grad, op, level, p_idx, ident, ts, dur)
    )


# graph name, phase, grad, op targets
GRAPHS = [
    ("__compiled_fn_1", "forward", 1, ["addmm", "relu", "t", "view", "mm"]),
    ("__compiled_fn_1", "backward", 1, ["mm", "t", "threshold_backward", "sum.dim_IntList"]),
    ("__compiled_fn_3", "inference", 0, ["native_layer_norm", "addmm", "getitem"]),
]


def our_trace(pid: int, seed: int, steps: int = 30, tids=None, rank: int = 0) -> list[str]:
    """One process's lines in the writer's layout."""
    rng = np.random.default_rng(seed)
    tids = tids or [pid]
    lines = [
        _dumps({"name": "HH", "cat": "dftracer", "pid": pid, "tid": pid, "ph": "M", "args": {"hhash": HH, "name": "node17", "value": HH}}),
        _dumps({"name": "process_name", "cat": "dftracer", "pid": pid, "tid": pid, "ph": "M", "args": {"hhash": HH, "name": f"python train.py [rank {rank}]"}}),
    ]  # fmt: skip
    for t in tids:
        lines.append(_dumps({"name": "thread_name", "cat": "dftracer", "pid": pid, "tid": t, "ph": "M", "args": {"hhash": HH, "name": f"T{t}", "value": "thread_name"}}))  # fmt: skip
    ts = 1795294435215479
    lines.append(_dumps({"id": 1, "name": "start", "cat": "dftracer", "pid": pid, "tid": pid, "ts": ts, "dur": 0, "ph": "X",
                         "args": {"hhash": HH, "ppid": 1, "rank": rank, "world_size": 2, "local_rank": rank}}))  # fmt: skip
    number = 0
    graph_numbers = []
    for gi, (graph, phase, _, targets) in enumerate(GRAPHS):
        number += 1
        g = number
        graph_numbers.append(g)
        cid = f"{gi}/0"
        lines.append(_dumps({"name": "OH", "cat": "dynascope", "pid": pid, "tid": pid, "ph": "M", "args": {
            "hhash": HH, "value": g, "hash": f"{seed:08x}{g:08x}", "kind": "graph", "compile_id": cid, "graph": graph,
            "phase": phase, "backend": "aot_eager", "n_ops": len(targets)}}))  # fmt: skip
        for k, tgt in enumerate(targets):
            number += 1
            lines.append(_dumps({"name": "OH", "cat": "dynascope", "pid": pid, "tid": pid, "ph": "M", "args": {
                "hhash": HH, "value": number, "hash": f"{seed:08x}{number:08x}", "graph_op": g, "index": k, "kind": "op",
                "compile_id": cid, "graph": graph, "phase": phase, "node": f"{tgt}_{k}", "op_type": "call_function",
                "target": f"aten.{tgt}", "layer": f"layers.{k % 3}" if k % 4 else "", "module_type": "Linear" if k % 2 else "ReLU",
                "file": "m.py", "line": 10 + k, "code": "x = f(x)", "backend": "aot_eager"}}))  # fmt: skip
    # compile events: nested phases
    ident = 2
    for gi in range(len(GRAPHS)):
        lines.append(_dumps({"name": "backend_compile", "cat": "dynamo.compile", "pid": pid, "tid": pid, "ph": "X",
                             "args": {"hhash": HH, "compile_id": f"{gi}/0", "level": 1, "p_idx": -1}, "id": ident + 1, "ts": ts + 10, "dur": 50}))  # fmt: skip
        lines.append(_dumps({"name": "entire_frame_compile", "cat": "dynamo.compile", "pid": pid, "tid": pid, "ph": "X",
                             "args": {"hhash": HH, "compile_id": f"{gi}/0", "level": 1, "p_idx": -1}, "id": ident, "ts": ts, "dur": 100}))  # fmt: skip
        ident += 2
        ts += 120
    for step in range(steps):
        tid = tids[step % len(tids)]
        region_id = ident
        ident += 1
        region_ts = ts
        body = []
        for gi in ([0, 1] if step % 5 else [2]):
            graph, phase, grad, targets = GRAPHS[gi]
            gid = ident
            ident += 1
            g_ts = ts
            ops = []
            for tgt in targets:
                dur = int(rng.integers(1, 40))
                if rng.random() < 0.05:
                    dur = int(rng.integers(1 << 23, 1 << 25))  # a long op: beyond the dense histogram
                ops.append(_op_line(f"function.{tgt}.default", pid, tid, grad, 3, gid, ident, ts, dur))
                ident += 1
                ts += dur
            gline = _graph_line(f"{graph}.{phase}", pid, tid, grad, graph_numbers[gi], 2, region_id, gid, g_ts, ts - g_ts)
            body.append(gline)
            body.extend(ops)
        if step % 7 == 3:  # an op at top level (no graph call)
            body.append(_op_line("function.getitem", pid, tid, 1, 1, -1, ident, ts, 3))
            ident += 1
            ts += 3
        lines.extend(body)
        ts += 5
        args = {"hhash": HH, "epoch": step // 10, "step": step, "level": 1, "p_idx": -1}
        lines.append(_dumps({"name": "step", "cat": "user", "pid": pid, "tid": tid, "ph": "X", "args": args,
                             "id": region_id, "ts": region_ts, "dur": ts - region_ts}))  # fmt: skip
    lines.append(_dumps({"name": "end", "cat": "dftracer", "pid": pid, "tid": pid, "ts": ts, "dur": 0, "ph": "X",
                         "args": {"hhash": HH, "num_events": ident, "dropped": 0, "used": {"dynamo": 1}}, "id": ident}))  # fmt: skip
    return lines


def _gz_members(text: bytes, per_member: int) -> bytes:
    lines = text.splitlines(keepends=True)
    return b"".join(gzip.compress(b"".join(lines[i : i + per_member]), compresslevel=1) for i in range(0, len(lines), per_member))


@pytest.fixture
def tiny(monkeypatch):
    """Chunks of a few KB, blocks of a few lines: cuts fall everywhere."""
    monkeypatch.setattr(_lines, "CHUNK_BYTES", 3000)
    monkeypatch.setattr(_inflate, "_MAX_OUT", 2500)
    monkeypatch.setattr(fastpath, "_REST_BATCH", 1500)
    monkeypatch.setattr(fastpath, "_GRAPH_BATCH", 7)


def _general(paths, top=20):
    return S.finish(S.merge([PB.general_file_partial(p) for p in paths]), top=top)


def _fast(paths, top=20, threads=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return S.summarize_files(paths, top=top, threads=threads)


def assert_same(a, b):
    for t in TABLES:
        assert_frame_equal(getattr(a, t), getattr(b, t), check_exact=True), t
    assert a.meta == b.meta


def _write_ours(tmp_path, *, truncate: bool = False, torn: bool = False):
    a = our_trace(4242, 1, steps=40, tids=[4242, 140234567891234])
    b = our_trace(4300, 2, steps=25, rank=1)
    pa = tmp_path / "t-4242.pfw.gz"
    if truncate:  # killed: the last member (the last 60 lines) is cut short
        data = _gz_members(("[\n" + "\n".join(a[:-60]) + "\n").encode(), 37)
        data += gzip.compress(("\n".join(a[-60:]) + "\n").encode(), compresslevel=1)[:-300]
    else:
        data = _gz_members(("[\n" + "\n".join(a) + "\n").encode(), 37)
    pa.write_bytes(data)
    pb = tmp_path / "t-4300.pfw"
    text = "[\n" + "\n".join(b) + "\n"
    if torn:
        text += b[-10][: len(b[-10]) // 2]
    pb.write_text(text)
    return [pa, pb]


@pytest.mark.parametrize("sizes", ["tiny", "default"])
def test_fast_path_equals_general_reader(tmp_path, request, sizes):
    if sizes == "tiny":
        request.getfixturevalue("tiny")
    paths = _write_ours(tmp_path)
    fast = _fast(paths)
    assert fast.meta["ops"] > 400
    assert_same(fast, _general(paths))
    assert fast.by_step.height == 40 and fast.by_step.get_column("op_count").sum() > 0


def test_fast_path_takes_the_op_lines(tmp_path):
    paths = _write_ours(tmp_path)
    text = gzip.decompress(paths[0].read_bytes()).decode()
    expect = sum(1 for ln in text.splitlines() if '"cat":"dynamo",' in ln and '"p_idx":-1' not in ln)
    fast_read = fastpath.read_fast(paths[0], P.SUMMARY_COLUMNS, PB.OpReducer())
    assert fast_read.ops_taken == expect > 300
    assert fast_read.graphs_taken == sum(1 for ln in text.splitlines() if '"cat":"dynamo.graph",' in ln) > 50


def test_graph_call_cut_from_its_ops(tmp_path, monkeypatch):
    """A chunk ending right after a graph call line: its ops are in the next chunk."""
    lines = our_trace(77, 3, steps=12)
    text = ("[\n" + "\n".join(lines) + "\n").encode()
    cut = text.index(b'"cat":"dynamo.graph"', len(text) // 2)
    cut = text.index(b"\n", cut) + 1
    p = tmp_path / "t-77.pfw"
    p.write_bytes(text)

    def pieces(data, log):
        yield data, 0, cut
        yield data, cut, len(data)

    monkeypatch.setattr(fastpath, "_pieces", pieces)
    fast = _fast([p])
    monkeypatch.undo()
    assert_same(fast, _general([p]))


def test_graph_call_after_its_ops(tmp_path, tiny):
    """Ops whose graph call line comes later in the file are resolved at the end."""
    lines = our_trace(78, 4, steps=8)
    i = next(i for i, ln in enumerate(lines) if '"cat":"dynamo.graph"' in ln and i > len(lines) // 2)
    g = lines.pop(i)
    lines.insert(i + 3, g)
    p = tmp_path / "t-78.pfw"
    p.write_text("[\n" + "\n".join(lines) + "\n")
    assert_same(_fast([p]), _general([p]))


@pytest.mark.parametrize("sizes", ["tiny", "default"])
def test_truncated_gzip_and_torn_line(tmp_path, request, sizes):
    if sizes == "tiny":
        request.getfixturevalue("tiny")
    paths = _write_ours(tmp_path, truncate=True, torn=True)
    fast = _fast(paths)
    general = _general(paths)
    assert_same(fast, general)
    assert fast.meta["dropped_lines"] >= 1
    assert any("truncated" in w for w in fast.meta["warnings"])
    assert any("torn" in w for w in fast.meta["warnings"])


def test_threads_do_not_change_the_result(tmp_path):
    paths = _write_ours(tmp_path)
    assert_same(_fast(paths, threads=1), _fast(paths, threads=2))


@pytest.mark.parametrize("kind", ["gen_c", "gen_c_gz", "gen_a", "chrome", "chrome_gz", "chrome_array"])
def test_other_layouts_summarise_as_before(tmp_path, tiny, kind):
    if kind == "gen_c":
        p = tmp_path / "a-9108f9e6e4763325-app.pfw"
        p.write_text(GEN_C)
    elif kind == "gen_c_gz":
        p = tmp_path / "trace-0123456789abcdef-app.pfw.gz"
        p.write_bytes(gzip.compress(GEN_C_NO_ARGS.encode()))
    elif kind == "gen_a":
        p = tmp_path / "app-python-10264-1.pfw"
        p.write_text(GEN_A)
    elif kind == "chrome":
        p = tmp_path / "host_4242.pt.trace.json"
        p.write_text(json.dumps(PROFILER, indent=1))
    elif kind == "chrome_gz":
        p = tmp_path / "host_4242.pt.trace.json.gz"
        p.write_bytes(gzip.compress(json.dumps(PROFILER, indent=1).encode()))
    else:
        p = tmp_path / "t.json"
        p.write_text(json.dumps(PROFILER["traceEvents"]))
    assert_same(_fast([p]), _general([p]))


def test_pydftracer_many_lines(tmp_path, tiny):
    """A long pydftracer file (ops carry hhash, no p_idx): nothing fits the fast path, same numbers."""
    rows = GEN_C.splitlines()
    ops = rows[6:8]
    text = "\n".join(rows[:6] + ops * 300 + rows[8:]) + "\n"
    p = tmp_path / "trace-app.pfw"
    p.write_text(text)
    assert_same(_fast([p]), _general([p]))


def test_inline_args_layout(tmp_path, tiny):
    """DYNASCOPE_INLINE_ARGS=1: attribution inline, no OH records; the general reader takes the ops."""
    lines = []
    for i in range(400):
        lines.append(
            '{"name":"function.addmm.default","cat":"dynamo","pid":5,"tid":5,"ph":"X","args":{"grad_enabled":1,'
            '"compile_id":"0/0","graph":"g","phase":"forward","layer":"fc","module_type":"Linear","level":3,"p_idx":1},'
            '"id":%d,"ts":%d,"dur":%d}' % (i + 2, 1000 + i, i % 7 + 1)
        )
    p = tmp_path / "t-5.pfw"
    p.write_text("[\n" + "\n".join(lines) + "\n")
    assert_same(_fast([p]), _general([p]))


def test_odd_lines_in_the_middle(tmp_path, tiny):
    """Two lines run together by a torn write, names with a colon or an escaped quote: same numbers."""
    lines = our_trace(79, 5, steps=20)
    ops = [i for i, ln in enumerate(lines) if '"cat":"dynamo",' in ln]
    i = ops[len(ops) // 2]
    lines[i] = lines[i][: len(lines[i]) // 2] + lines[i + 1]
    del lines[i + 1]
    lines = [ln.replace('"name":"function.relu.default"', '"name":"odd:\\"q\\".relu"') for ln in lines]
    lines = [ln.replace('"name":"function.t.default"', '"name":"x\\u00e9.t"') for ln in lines]
    p = tmp_path / "t-79.pfw"
    p.write_text("[\n" + "\n".join(lines) + "\n")
    fast, general = _fast([p]), _general([p])
    assert_same(fast, general)
    assert fast.meta["dropped_lines"] == 1
    names = fast.by_op.get_column("name").to_list()
    assert 'odd:"q".relu' in names and "x\u00e9.t" in names


@pytest.mark.parametrize("torn", [False, True])
def test_many_small_members(tmp_path, torn):
    """A writer that flushes often: many small gzip members are read as large chunks (the fast path
    takes them), and a torn last line in a whole member is reported as the general reader does."""
    lines = our_trace(81, 6, steps=300)
    text = ("[\n" + "\n".join(lines) + "\n").encode()
    if torn:
        text += lines[-5][:40].encode()
    p = tmp_path / "t-81.pfw.gz"
    p.write_bytes(_gz_members(text, 25))
    fast_read = fastpath.read_fast(p, P.SUMMARY_COLUMNS, PB.OpReducer())
    expect = sum(1 for ln in lines if '"cat":"dynamo",' in ln and '"p_idx":-1' not in ln)
    assert fast_read.ops_taken == expect
    fast, general = _fast([p]), _general([p])
    assert_same(fast, general)
    assert fast.meta["dropped_lines"] == int(torn)


def _scan_text(lines: list[str], cap: int = 1 << 12):
    """Scan text made of `lines` with a fresh Scanner: (scanner, times, graph rows, the other lines)."""
    text = ("\n".join(lines) + "\n").encode()
    sc = _scan.Scanner(cap)
    times, rows, rest = sc.scan(text, 0, len(text))
    others = b"".join(text[a:b] for a, b in rest.T.tolist()).decode().splitlines()
    return sc, times, rows, others


def test_scanner_takes_exactly_the_two_layouts():
    g = _graph_line("__compiled_fn_1.forward", 7, 8, 1, 3, 2, 10, 11, 1795294435582550, 80)
    ops = [_op_line(f"function.op{k}.default", 7, 8, 1, 3, 11, 12 + k, 1795294435582550 + k, 5 + k) for k in range(3)]
    other = [
        '{"name":"step","cat":"user","pid":7,"tid":8,"ph":"X","args":{"hhash":"%s","p_idx":-1,"level":1},"id":1,"ts":5,"dur":9}' % HH,
        _op_line("function.top", 7, 8, 1, 1, -1, 20, 1795294435582560, 3),  # top level: negative p_idx
        _op_line("function.x", 7, 8, 1, 3, 11, 21, 1795294435582560, 3).replace('"dur":3', '"dur":03'),  # leading zero
        _op_line("function.x", 7, 8, 1, 3, 11, 22, 1795294435582560, 3).replace('"dur":3', '"dur":1234567890123456789'),
        _op_line("function.x", 7, 8, 1, 3, 11, 23, 1795294435582560, 3).replace('"ph":"X"', '"ph":"B"'),
        _graph_line("g.forward", 7, 8, 1, 3, 2, 10, 30, 5, 80).replace(HH, "9c1185a5c5e9fc5z"),  # not hex
        _op_line("function.x", 7, 8, 1, 3, 11, 11, 1795294435582560, 3),  # id not after its parent
        "[",
        "",
    ]
    lines = [other[0], g, ops[0], other[1], ops[1], *other[2:], ops[2]]
    sc, times, rows, others = _scan_text(lines)
    assert others == [other[0], other[1], *other[2:]]
    assert times.tolist() == [[7] * 3, [8] * 3, [1795294435582550 + k for k in range(3)], [5, 6, 7]]
    assert rows[:9, 0].tolist() == [7, 8, 11, 1795294435582550, 80, 10, 2, 1, 3]
    assert sc.name_bytes(int(rows[9, 0])) == b'"__compiled_fn_1.forward"' and sc.host_hash() == HH
    pid, gop, k, name = sc.op_keys()
    order = np.argsort(k)
    assert (pid[order].tolist(), gop[order].tolist(), k[order].tolist()) == ([7] * 3, [3] * 3, [0, 1, 2])
    assert [sc.name_bytes(int(i)) for i in name[order]] == [f'"function.op{k}.default"'.encode() for k in range(3)]


def test_scanner_names_negative_parents_and_pending_ops():
    """Names with escaped quotes, a colon or non-ASCII are taken as their raw bytes; a later line whose
    name differs for the same key goes to the general reader; an op whose graph call is not known yet is
    keyed by its parent (-2 - p_idx); a graph call's negative p_idx is parsed; a second host is left."""
    odd = 'odd:"q"\u00e9.relu'
    lines = [
        _op_line(odd, 5, 5, 1, 3, 40, 41, 100, 2),  # graph call 40 comes later
        _graph_line("g.forward", 5, 5, 1, 9, 1, -1, 40, 99, 10),
        _op_line(odd, 5, 5, 1, 3, 40, 41, 101, 2),
        _op_line("x\u00e9.t", 5, 5, 1, 3, 40, 42, 102, 4),
        _op_line("another name", 5, 5, 1, 3, 40, 42, 103, 4),  # same key (op 9, k 1), other name
        _graph_line("g.forward", 5, 5, 1, 9, 1, -1, 50, 99, 10).replace(HH, "0123456789abcdef"),
    ]
    sc, times, rows, others = _scan_text(lines)
    assert others == [lines[4], lines[5]]
    assert times[3].tolist() == [2, 2, 4]
    assert rows[5].tolist() == [-1]
    _pid, gop, k, name = sc.op_keys()
    keys = {(int(a), int(b)): json.loads(sc.name_bytes(int(n))) for a, b, n in zip(gop, k, name, strict=True)}
    assert keys == {(-42, 0): 'odd:"q"\u00e9.relu', (9, 0): 'odd:"q"\u00e9.relu', (9, 1): "x\u00e9.t"}
    bins = sorted(zip(*(x.tolist() for x in sc.op_bins()), strict=True))
    assert [(b[1], b[2]) for b in bins] == sorted([(2, 1), (2, 1), (4, 1)])


def test_scanner_tables_grow():
    """Many keys and durations from a tiny start: every table grows (the scan resumes where it stopped)."""
    rng = np.random.default_rng(5)
    lines, expect, ident = [], {}, 1
    for call in range(300):
        gop = int(rng.integers(0, 50))
        gid = ident
        lines.append(_graph_line(f"g{gop}.forward", 3, 3, 0, gop, 1, -1, gid, 1000 + call, 9))
        ident += 1
        for k in range(int(rng.integers(1, 12))):
            dur = int(rng.integers(0, 5000))
            lines.append(_op_line(f"op{gop}.{k}", 3, 3, 0, 2, gid, ident, 1000 + call, dur))
            ident += 1
            expect[(f"op{gop}.{k}", dur)] = expect.get((f"op{gop}.{k}", dur), 0) + 1
    sc, times, rows, others = _scan_text(lines, cap=4)
    assert others == [] and rows.shape[1] == 300 and times.shape[1] == sum(expect.values())
    _pid, gop, k, _name = sc.op_keys()
    bin_name, dur, n = sc.op_bins()
    got = {(json.loads(sc.name_bytes(int(a))), int(d)): int(c) for a, d, c in zip(bin_name, dur, n, strict=True)}
    assert got == expect


def test_pieces_cut_lines_anywhere(tmp_path, monkeypatch):
    """gzip members cut in the middle of lines (and of a graph call's run of ops), pieces without any
    newline, a plain file read in tiny ranges: the same summaries as the general reader."""
    lines = our_trace(91, 8, steps=40)
    text = ("[\n" + "\n".join(lines) + "\n").encode()
    cuts = sorted({7, 8, 150, 151, 152, *range(900, len(text), 977)})
    members = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    p = tmp_path / "t-91.pfw.gz"
    p.write_bytes(b"".join(gzip.compress(m, compresslevel=1) for m in members))
    q = tmp_path / "t-92.pfw"
    q.write_bytes(text.replace(b'"pid":91', b'"pid":92'))
    monkeypatch.setattr(_lines, "CHUNK_BYTES", 500)
    fast = _fast([p, q])
    fast_read = fastpath.read_fast(p, P.SUMMARY_COLUMNS, PB.OpReducer())
    assert fast_read.ops_taken == sum(1 for ln in lines if '"cat":"dynamo",' in ln and '"p_idx":-1' not in ln)
    assert_same(fast, _general([p, q]))


@pytest.mark.parametrize(
    "content",
    [b"", b"\n\n", b"[\n", gzip.compress(b"", mtime=0), gzip.compress(b"[\n", mtime=0)],
    ids=["empty", "blank-lines", "header", "gzip-empty", "gzip-header"],  # stable ids: pytest -n 2 collects twice
)
def test_empty_files(tmp_path, content):
    """Empty or header-only files: the general reader's answer (an empty summary or its error)."""
    p = tmp_path / "t-1.pfw.gz"
    p.write_bytes(content)
    try:
        general = _general([p])
    except Exception as exc:  # noqa: BLE001
        with pytest.raises(type(exc)):
            _fast([p])
    else:
        assert_same(_fast([p]), general)


def test_bad_digit_in_a_long_field(tmp_path, tiny):
    """An op line whose 16-digit ts holds a letter is left to the general reader (which drops it)."""
    lines = our_trace(83, 7, steps=20)
    ops = [i for i, ln in enumerate(lines) if '"cat":"dynamo",' in ln and '"p_idx":-1' not in ln]
    for i in ops[5:8]:
        lines[i] = lines[i].replace('"ts":1795', '"ts":179a', 1)
    p = tmp_path / "t-83.pfw"
    p.write_text("[\n" + "\n".join(lines) + "\n")
    fast, general = _fast([p]), _general([p])
    assert_same(fast, general)
    assert fast.meta["dropped_lines"] == 3


def test_scanner_takes_the_writers_layout():
    """The lines trace/format.py defines (what the writer formats) are the lines the scanner takes."""
    from dynascope.trace import format as layout

    graph = layout.head('"g.forward"', layout.GRAPH_CAT, 7, 8, 1, 2, hhash=HH, attribution=layout.OP + "3") + layout.tail(-1, 10, 500, 80)
    op = layout.head('"function.mm.default"', layout.OP_CAT, 7, 8, 1, 3) + layout.tail(10, 11, 510, 5)
    assert graph.rstrip("\n") == _graph_line("g.forward", 7, 8, 1, 3, 2, -1, 10, 500, 80)
    assert op.rstrip("\n") == _op_line("function.mm.default", 7, 8, 1, 3, 10, 11, 510, 5)
    _sc, times, rows, others = _scan_text([graph.rstrip("\n"), op.rstrip("\n")])
    assert others == [] and rows.shape[1] == 1 and times[:, 0].tolist() == [7, 8, 510, 5]
