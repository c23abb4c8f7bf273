"""Turn torch's compile records (metrics dicts, structured-trace payloads) into model objects.

Plain parsing, no torch: the inputs are the dicts and strings torch hands out.
"""

from __future__ import annotations

import json
import re
from typing import Any

from dynascope import _torch
from dynascope.artifacts.explanation import (
    CacheLimitHit,
    CompileTime,
    DdpBucket,
    DdpSplit,
    EagerFallback,
    GraphBreak,
    Recompile,
    RecompileFailure,
)
from dynascope.explain.code import excerpt
from dynascope.explain.guards import _strip_comment, readable_check
from dynascope.userframes import first_user_frame

_CID = re.compile(r"^\s*(?P<cid>\[?!?\d+/\d+(?:_\d+)?\]?):\s*(?P<rest>.*)$", re.S)
_EXPECTED = re.compile(r"expected (?P<exp>[^,]+?), actual (?P<act>\S+?)\.?$")
_TENSOR_SUBJECT = re.compile(r"tensor '(?P<src>.+?)' (?=[\w ]*(?:mismatch|expected))")


def frame_id(cid: str | None) -> str | None:
    """The frame part of a compile id ("3" of "3/1"): every compile of one user frame shares it."""
    if not cid:
        return None
    m = re.match(r"\[?!?(\d+)/", cid)
    return m.group(1) if m else None


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) else None


def compile_time(row: dict[str, Any]) -> CompileTime:
    """A compilation_metrics record -> CompileTime with disjoint phases that add up to total_s."""
    total = _num(row.get("entire_frame_compile_time_s"))
    if total is None and _num(row.get("dynamo_cumulative_compile_time_us")) is not None:
        total = row["dynamo_cumulative_compile_time_us"] / 1e6
    backend_call = _num(row.get("backend_compile_time_s"))
    inductor = _num(row.get("inductor_compile_time_s"))
    if inductor is None and _num(row.get("inductor_cumulative_compile_time_us")) is not None:
        inductor = row["inductor_cumulative_compile_time_us"] / 1e6
    # torch's metrics do not separate AOT autograd from the backend (its "aot_autograd_cumulative" is
    # the whole backend call); the observer splits them using torch's own timed events (apply_phases).
    aot = None
    backend = backend_call
    dynamo = None if total is None else max(0.0, total - (backend_call or 0.0))
    fail_type = row.get("fail_type")
    fail_reason = row.get("fail_reason")
    status = "ok"
    if fail_type:
        status = "failed"
    elif row.get("graph_op_count") in (None,) and total is None:
        status = "skipped"
    return CompileTime(
        compile_id=str(row.get("compile_id")),
        function=row.get("co_name"),
        file=row.get("co_filename"),
        line=row.get("co_firstlineno"),
        total_s=total, dynamo_s=dynamo, aot_s=aot, backend_s=backend, inductor_s=inductor,
        graph_op_count=row.get("graph_op_count"), guard_count=row.get("guard_count"),
        status=status, fail_type=fail_type,
        fail_reason=(str(fail_reason).strip().splitlines()[0] if fail_reason else None),
    )


# torch's phase for a backward graph compiled lazily, at the first backward() after the frame's compile
LAZY_BACKWARD = "entire_backward_compile"


def apply_phases(ct: CompileTime, durations: dict[str, float]) -> None:
    """Split a compile's time with torch's timed events (seconds per event name for one compile id):
    entire_frame_compile, backend_compile, create_aot_dispatcher_function, inductor_compile and inductor's
    fw/bw compiler wrappers. On an AOT/inductor cache hit torch emits no AOT or inductor events, so
    aot_s and inductor_s stay None and the whole backend call counts as backend_s.

    A backward that AOT autograd compiled lazily (entire_backward_compile, at the first backward() call)
    is part of the compile id's time: backward_s, included in total_s; the events inside it come keyed
    "entire_backward_compile:<name>" (observer) and are left out of the frame's split."""
    frame_total = durations.get("entire_frame_compile")
    if frame_total is None and ct.total_s is not None:
        frame_total = ct.total_s - (ct.backward_s or 0.0)
    lazy = durations.get(LAZY_BACKWARD)
    if lazy is not None:
        ct.backward_s = lazy
    if frame_total is not None:
        ct.total_s = frame_total + (ct.backward_s or 0.0)
    backend_call = durations.get("backend_compile")
    if backend_call is None:
        return
    inductor = durations.get("inductor_compile") or durations.get("compile_fx_inner")
    # the compiler AOT autograd calls (inductor's fw/bw compilers, joint-graph passes included) is backend time
    inner = (durations.get("compile_fx.<locals>.fw_compiler_base", 0.0)
             + (durations.get("compile_fx.<locals>.bw_compiler_base")
                or durations.get("compile_fx.<locals>.bw_compiler", 0.0))) or (inductor or 0.0)
    aot_total = durations.get("create_aot_dispatcher_function")
    aot = None if aot_total is None else max(0.0, min(backend_call, aot_total - inner))
    ct.aot_s = aot
    ct.backend_s = max(0.0, backend_call - (aot or 0.0))
    if inductor is not None:
        ct.inductor_s = inductor
    if frame_total is not None:
        ct.dynamo_s = max(0.0, frame_total - backend_call)


def parse_failure(text: str) -> RecompileFailure:
    """'0/0: tensor 'a' size mismatch at index 0. expected 10, actual 20' (+ user stack) -> failure."""
    first = text.strip().split("\nUser stack trace:")[0].strip()
    cid = None
    m = _CID.match(first)
    if m:
        cid, first = m.group("cid").strip("[]"), m.group("rest")
    first = re.sub(r"\s*\(HINT: [^)]*\)\s*$", "", first)
    check, _code, _where = _strip_comment(first)
    check = check.strip()
    subject = expected = actual = None
    me = _EXPECTED.search(check)
    if me:
        expected, actual = me.group("exp").strip(), me.group("act").strip()
    mt = _TENSOR_SUBJECT.search(check)
    if mt:
        from dynascope.explain.guards import readable_source

        subject = readable_source(mt.group("src"))
        reason = check.replace(f"tensor '{mt.group('src')}'", f"tensor '{subject}'")
    elif " mismatch" in check or "expected" in check:
        reason = check
    else:
        readable = readable_check("", check)
        reason = f"guard failed: {readable}"
        mq = re.match(r"^(?P<lhs>[\w.\[\]'\"]+) == (?P<rhs>.+)$", check)
        if mq:
            from dynascope.explain.guards import readable_source

            subject, expected = readable_source(mq.group("lhs")), mq.group("rhs").strip()
        else:
            mi = re.search(r"\(([A-Za-z_][\w.\[\]']*), -?\d+\)", check)
            if mi:
                from dynascope.explain.guards import readable_source

                subject = readable_source(mi.group(1))
    return RecompileFailure(compile_id=cid, reason=reason, subject=subject, expected=expected, actual=actual)


def split_reasons(payload: Any) -> list[str]:
    """recompile_reason / recompile_reasons payload -> one string per failing cache entry."""
    if payload is None:
        return []
    if isinstance(payload, str):
        text = payload.strip()
        if text.startswith("["):
            try:
                return split_reasons(json.loads(text))
            except ValueError:
                pass
        # several failures in one string: split where a new "N/M: " starts a line
        chunks = re.split(r"\n(?=\d+/\d+(?:_\d+)?: )", text)
        return [c for c in chunks if c.strip()]
    if isinstance(payload, (list, tuple)):
        out: list[str] = []
        for item in payload:
            out.extend(split_reasons(item))
        return out
    return [str(payload)]


def recompile(row: dict[str, Any], reasons: list[str] | None = None) -> Recompile | None:
    texts = reasons if reasons else split_reasons(row.get("recompile_reason"))
    if not texts:
        return None
    failures = [parse_failure(t) for t in texts]
    return Recompile(
        function=row.get("co_name"), file=row.get("co_filename"), line=row.get("co_firstlineno"),
        compile_id=str(row.get("compile_id")) if row.get("compile_id") is not None else None,
        reason=failures[0].reason, failures=failures,
    )


def cache_limit_hit(
    row: dict[str, Any], limit: int | None, code_info: tuple[str, str, int] | None
) -> CacheLimitHit | None:
    if not is_limit_refusal(row):
        return None
    texts = split_reasons(row.get("recompile_reason"))
    last = parse_failure(texts[0]).reason if texts else None
    name, file, line = code_info or (row.get("co_name"), row.get("co_filename"), row.get("co_firstlineno"))
    return CacheLimitHit(function=name, file=file, line=line, limit=limit, reason=last)


def is_limit_refusal(row: dict[str, Any]) -> bool:
    """Torch refused the compile at the recompile limit: 'recompile limit' (2.13 .. 2.15),
    'recompile_limit reached' (2.8), 'cache_size_limit' (2.5.1)."""
    reason = str(row.get("fail_reason") or "").lower().replace("_", " ")
    return "recompile limit" in reason or "cache size limit" in reason


def eager_fallback(
    row: dict[str, Any], code_info: tuple[str, str, int] | None, limit: int | None = None
) -> EagerFallback | None:
    if not row.get("fail_type"):
        return None
    name, file, line = code_info or (row.get("co_name"), row.get("co_filename"), row.get("co_firstlineno"))
    reason = str(row.get("fail_reason") or row.get("fail_type")).strip().splitlines()[0]
    if is_limit_refusal(row):  # one wording on every torch
        reason = f"recompile limit ({limit}) reached" if limit is not None else "recompile limit reached"
    return EagerFallback(function=name, file=file, line=line, compile_id=str(row.get("compile_id")), reason=reason)


def _first_reason(lines: list[str]) -> str | None:
    for ln in lines:
        s = ln.strip()
        if not s or s.startswith("Encountered graph break when attempting to trace"):
            continue
        return s
    return None


_GB_AT = re.compile(r"Graph break in user code at (?P<file>.+):(?P<line>\d+)")
_TB_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)')


def graph_break(payload: str, compile_id: str | None) -> GraphBreak | None:
    """A dynamo_graph_break_reason payload -> GraphBreak (count 1)."""
    if not payload:
        return None
    text = payload.split("\nTraceback (most recent call last):", maxsplit=1)[0]
    head, _, tb = text.partition("User code traceback:")
    file = line = fn = None
    m = _GB_AT.search(head)
    if m:
        file, line = m.group("file"), int(m.group("line"))
    frames = [(mt.group("file"), int(mt.group("line")), mt.group("fn"))
              for mt in (_TB_FRAME.match(tl) for tl in tb.splitlines()) if mt]  # fmt: skip
    library = None
    if frames:  # the first user frame (userframes.py), the library line it led to kept beside it
        user = first_user_frame([f[0] for f in frames])
        file, line, fn = frames[-1] if user is None else frames[user]
        if user is not None and user != len(frames) - 1:
            library = f"{frames[-1][0]}:{frames[-1][1]}"
    block = head.split("Graph Break Reason:", 1)[-1] if "Graph Break Reason:" in head else head
    lines = [ln.rstrip() for ln in block.splitlines()]
    reason = _first_reason(lines)
    if reason and reason.startswith("Failed to handle graph break gracefully"):
        # the frame was skipped: name the break itself, and the one that stopped Dynamo resuming
        first, _, second = block.partition("*** While handling this graph break, another graph break occurred: ***")
        head_lines = first.splitlines()
        cut = next((i for i, ln in enumerate(head_lines) if ln.strip().startswith("Failed to handle graph break")), 0)
        inner = _first_reason(head_lines[cut + 1:])
        then = _first_reason(second.splitlines()) if second else None
        reason = f"{inner or 'graph break'} (the whole function fell back to eager" + (f": {then})" if then else ")")

    detail_lines = [ln for ln in lines if not ln.strip().startswith("Developer debug context")]
    detail = "\n".join(detail_lines).strip() or None
    if fn and fn.startswith("torch_dynamo_resume_in_"):
        fn = re.sub(r"^torch_dynamo_resume_in_(.+)_at_\d+$", r"\1", fn)
    return GraphBreak(
        reason=reason or "graph break", detail=detail, function=fn, file=file, line=line,
        excerpt=excerpt(file, line), count=1, compile_ids=[compile_id] if compile_id else [], library=library,
    )


def graph_break_from_stack(reason: str, stack: list[tuple[str, int, str]], compile_id: str | None) -> GraphBreak:
    """A graph break from torch's in-process list (torch 2.5.1, which logs no graph-break records)."""
    user = first_user_frame([f[0] for f in stack])
    file, line, fn = (stack[-1] if user is None else stack[user]) if stack else (None, None, None)
    library = f"{stack[-1][0]}:{stack[-1][1]}" if user is not None and user != len(stack) - 1 else None
    name = _torch.break_reason_name(reason)
    if fn and fn.startswith("torch_dynamo_resume_in_"):
        fn = re.sub(r"^torch_dynamo_resume_in_(.+)_at_\d+$", r"\1", fn)
    return GraphBreak(
        reason=name, detail=reason.strip() or None, function=fn, file=file, line=line,
        excerpt=excerpt(file, line), count=1, compile_ids=[compile_id] if compile_id else [], library=library,
    )


def ddp_split(split: dict[str, Any], compile_id: str | None, graph: str | None, function: str | None,
              file: str | None, line: int | None) -> DdpSplit:
    """_torch.ddp_split()'s description of DDPOptimizer's split -> DdpSplit (its pieces' layers named as the
    trace's graph records name them: capture/attribution.py ddp_split_fields)."""
    from dynascope.capture.attribution import ddp_split_fields

    count = int(split.get("count") or 0)
    buckets = []
    for index in range(count):
        fields = ddp_split_fields({**split, "index": index})
        buckets.append(DdpBucket(piece=fields["ddp_split"], bucket=fields["ddp_bucket"], params=fields["ddp_params"],
                                 bytes=fields["ddp_bytes"], layers=fields["ddp_layers"]))  # fmt: skip
    graph = re.sub(r"_[0-9a-f]{8}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{12}$", "", graph) if graph else None
    return DdpSplit(compile_id=compile_id, graph=graph, function=function, file=file, line=line, graphs=count,
                    cap_bytes=split.get("cap"), first_cap_bytes=split.get("first_cap"), buckets=buckets)  # fmt: skip
