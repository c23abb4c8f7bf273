"""The byte-level fast path (analyze/fastpath.py) gives exactly the general reader's summaries.

Traces are written line by line in the writer's exact layout (trace/decode.py `_template`): graph calls
naming their OH record, op events that refer to attribution through their graph call
(id = p_idx + 1 + k), regions, compile events, several threads, a forked child; chunks and blocks are
made tiny so that chunk cuts fall everywhere, including between a graph call and its ops.
"""

from __future__ import annotations

import gzip
import json
import warnings

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import dynascope.analyze._inflate as _inflate
import dynascope.analyze.fastpath as fastpath
import dynascope.analyze.reader as reader
import dynascope.analyze.summarize as S

from test_reader import GEN_A, GEN_C, GEN_C_NO_ARGS, PROFILER

TABLES = ["by_op", "by_layer", "by_phase", "by_graph", "by_step", "by_process", "compile_vs_run", "top_ops"]

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
            for k, tgt in enumerate(targets):
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
    monkeypatch.setattr(reader, "_CHUNK", 3000)
    monkeypatch.setattr(_inflate, "_MAX_OUT", 2500)
    monkeypatch.setattr(fastpath, "_BLOCK", 700)
    monkeypatch.setattr(fastpath, "_MIN_LINES", 1)
    monkeypatch.setattr(fastpath, "_MIN_BYTES", 64)
    monkeypatch.setattr(fastpath, "_REST_BATCH", 1500)


def _general(paths, top=20):
    return S.finish(S.merge([S._file_partial_general(p) for p in paths]), top=top)


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


def test_fast_path_takes_the_op_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(fastpath, "_MIN_LINES", 1)
    monkeypatch.setattr(fastpath, "_MIN_BYTES", 64)
    paths = _write_ours(tmp_path)
    text = gzip.decompress(paths[0].read_bytes()).decode()
    expect = sum(1 for ln in text.splitlines() if '"cat":"dynamo",' in ln and '"p_idx":-1' not in ln)
    _, _, state = fastpath.read_fast(paths[0], S.SUMMARY_COLUMNS, S._OpReducer())
    assert state.fast_ops == expect > 300
    assert state.fast_graphs == sum(1 for ln in text.splitlines() if '"cat":"dynamo.graph",' in ln) > 50


def test_graph_call_cut_from_its_ops(tmp_path, monkeypatch):
    """A chunk ending right after a graph call line: its ops are in the next chunk."""
    lines = our_trace(77, 3, steps=12)
    text = ("[\n" + "\n".join(lines) + "\n").encode()
    cut = text.index(b'"cat":"dynamo.graph"', len(text) // 2)
    cut = text.index(b"\n", cut) + 1
    p = tmp_path / "t-77.pfw"
    p.write_bytes(text)
    real = reader._text_chunks

    def chunks(data, state):
        yield data[:cut]
        yield data[cut:]

    monkeypatch.setattr(reader, "_text_chunks", chunks)
    monkeypatch.setattr(fastpath, "_MIN_LINES", 1)
    monkeypatch.setattr(fastpath, "_MIN_BYTES", 64)
    fast = _fast([p])
    monkeypatch.setattr(reader, "_text_chunks", real)
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
    _, _, state = fastpath.read_fast(p, S.SUMMARY_COLUMNS, S._OpReducer())
    expect = sum(1 for ln in lines if '"cat":"dynamo",' in ln and '"p_idx":-1' not in ln)
    assert state.fast_ops == expect
    fast, general = _fast([p]), _general([p])
    assert_same(fast, general)
    assert fast.meta["dropped_lines"] == int(torn)


def test_ints_and_windows_agree_with_python():
    """The SWAR integer parser (every length 1..16, all-16-digit rows on their own fast path, bad digits)
    and the fixed-window matcher (a pattern ending at a known colon compared without its colon)."""
    rng = np.random.default_rng(3)
    for lengths in (rng.integers(1, 17, 400), np.full(400, 16)):
        fields = [str(int(rng.integers(1, 10))) + "".join(map(str, rng.integers(0, 10, n - 1))) for n in lengths]
        fields[7] = fields[7][:-1] + "x"
        fields[11] = "/" + fields[11][1:]
        buf = ("        " + "".join(f":{f}," for f in fields)).encode()
        lo, hi, pos = [], [], 8
        for f in fields:
            lo.append(pos + 1)
            hi.append(pos + 1 + len(f))
            pos += len(f) + 2
        w = fastpath._words(buf)
        vals, ok = fastpath._ints(w, np.array(lo), np.array(hi))
        for f, v, k in zip(fields, vals.tolist(), ok.tolist()):
            assert k == f.isdigit() and (not k or v == int(f))
        colons = np.array(lo) - 1
        for pat in (b":", b',":', b'2":', b'01234567:', b'"abcdefghijk":'):
            assert (fastpath._match_end(w, colons, pat, True) == fastpath._match_end(w, colons, pat)).all()


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
