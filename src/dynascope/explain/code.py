"""Source text helpers: decompile (with a dis fallback that never fails) and resume markers."""

from __future__ import annotations

import dis
import inspect
import linecache
import types

from dynascope.artifacts.explanation import RESUME_MARKER


def dis_text(code: types.CodeType, why: str | None = None) -> str:
    head = f"# bytecode of {code.co_name} ({code.co_filename}:{code.co_firstlineno})"
    if why:
        head += f"\n# not decompiled: {why}"
    try:
        body = dis.Bytecode(code).dis()
    except Exception as exc:  # noqa: BLE001 - the report must never crash on odd code
        body = f"# dis failed: {type(exc).__name__}: {exc}"
    return head + "\n" + body


def decompile_code(code: types.CodeType) -> tuple[str, bool]:
    """(source, True) from our decompiler, or (annotated dis, False) if it is missing or fails."""
    try:
        from dynascope.decompiler import decompile_or_dis
    except Exception as exc:  # noqa: BLE001 - a decompiler that cannot load must not take the report down
        return dis_text(code, f"decompiler unavailable ({type(exc).__name__})"), False
    try:
        text, ok = decompile_or_dis(code)
        return str(text), bool(ok)
    except Exception as exc:  # noqa: BLE001 - decompile_or_dis should not raise; if it does, fall back anyway
        return dis_text(code, f"decompiler failed ({type(exc).__name__}: {exc})"), False


def source_lines(code: types.CodeType) -> tuple[list[str], int] | None:
    """The source lines of the function a code object came from and its first line number."""
    try:
        lines, start = inspect.getsourcelines(code)
        return [ln.rstrip("\n") for ln in lines], max(start, 1)
    except (OSError, TypeError):
        pass
    lines = linecache.getlines(code.co_filename)
    if not lines:
        return None
    start = code.co_firstlineno
    if not 0 < start <= len(lines):
        return None
    block = inspect.getblock(lines[start - 1:])
    return [ln.rstrip("\n") for ln in block], start


def source_with_marker(code: types.CodeType, line: int | None, marker: str = RESUME_MARKER) -> str | None:
    found = source_lines(code)
    if found is None:
        return None
    lines, start = found
    out = list(lines)
    if line is not None and start <= line < start + len(out):
        out[line - start] = out[line - start] + marker
    return "\n".join(out)


def excerpt(file: str | None, line: int | None, context: int = 0) -> str | None:
    if not file or not line:
        return None
    lines = linecache.getlines(file)
    if not lines or line > len(lines):
        return None
    lo, hi = max(1, line - context), min(len(lines), line + context)
    width = len(str(hi))
    return "\n".join(f"{n:>{width}} {lines[n - 1].rstrip()}" for n in range(lo, hi + 1))


def line_at_offset(code: types.CodeType, offset: int | None) -> int | None:
    """The source line of the instruction at a bytecode offset of `code` (None if unknown)."""
    if offset is None:
        return None
    line = None
    try:
        for ins in dis.get_instructions(code):
            if ins.starts_line is not None:
                line = ins.starts_line
            pos = getattr(ins, "positions", None)
            if ins.offset >= offset:
                if pos is not None and pos.lineno is not None:
                    return pos.lineno
                return line
    except Exception:  # noqa: BLE001 - no line rather than a crashed report
        return None
    return None
