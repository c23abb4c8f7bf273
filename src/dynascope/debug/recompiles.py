"""Recompilations as errors and as facts: which guard failed, its old and new value, the user line that
introduced it, and one thing to try.

    with dynascope.no_recompiles():      # raises RecompileError on the first recompilation
        train()
    dynascope.recompiles(compiled_fn)    # the recompiles so far, each with the same facts

Built on torch's own refusal (`torch._dynamo.config.error_on_recompile`: unlike
`torch.compiler.set_stance("fail_on_recompile")`, it lets a function's first compile go ahead; the
stance's error is recognised too) and on explain's guards, which know the user line behind each guard.
"""

from __future__ import annotations

import contextlib
import re
import types
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from dynascope import _torch
from dynascope.analyze.fixes import recompile_fix
from dynascope.artifacts.explanation import GuardGroup, RecompileFailure
from dynascope.errors import DynascopeError
from dynascope.explain import torch_records as records
from dynascope.explain.api import explain_code, globals_for_code, resolve
from dynascope.explain.guards import user_line_of

__all__ = ["RecompileError", "RecompileFact", "no_recompiles", "recompiles"]

_NAME = re.compile(r"[A-Za-z_]\w*")


@dataclass
class RecompileFact:
    """One recompilation: the function, the guard that failed, its old and new value, where the guard
    comes from in the user's code, and what to try."""

    function: str
    file: str | None
    line: int | None  # where the function starts
    compile_id: str | None  # the cache entry whose guard failed
    guard: str  # the failed check, readable
    subject: str | None = None  # what it checks ("n", "x")
    old: str | None = None
    new: str | None = None
    source: str = ""  # "model.py:12": the user line that introduced the guard
    code: str = ""
    suggestion: str = ""

    def __str__(self) -> str:
        where = f" ({_short(self.file)}:{self.line})" if self.file else ""
        text = f"{self.function}{where} recompiles: {self.guard}"
        if self.compile_id:
            text += f" (a guard of cache entry {self.compile_id})"
        if self.old is not None or self.new is not None:
            old = self.old if self.old is not None else "?"
            new = self.new if self.new is not None else "?"
            text += f"; {self.subject or 'the value'} was {old}, now {new}"
        if self.source:
            text += f". The guard comes from {self.source}" + (f": {self.code}" if self.code else "")
        return text + (f". Try: {self.suggestion}" if self.suggestion else ".")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class RecompileError(DynascopeError):
    """A compiled function recompiled where `no_recompiles` forbids it; `.fact` says why."""

    def __init__(self, fact: RecompileFact):
        super().__init__(str(fact))
        self.fact = fact


@contextlib.contextmanager
def no_recompiles() -> Iterator[None]:
    """Raise RecompileError on the first recompilation of any compiled function inside the block."""
    try:
        with _torch.recompile_refusal():
            yield
    except Exception as exc:
        translated = as_recompile_error(exc)
        if translated is exc:
            raise
        raise translated from exc


def as_recompile_error(exc: BaseException) -> BaseException:
    """A RecompileError with the facts, when `exc` is Dynamo refusing a recompile; else `exc`."""
    refused = _torch.refused_recompile(exc)
    if refused is None:
        return exc
    error = RecompileError(fact_of_refusal(refused))
    error.__cause__ = exc
    return error


def fact_of_refusal(refused: dict[str, Any]) -> RecompileFact:
    """The facts of a refused recompile: from the guards themselves when the compiled call is known
    (its arguments give the new value), else from the reasons torch gave."""
    call = refused.get("call")
    if call is not None:
        fn, args, kwargs = call
        try:
            target = resolve(fn)
            if target.code.co_name == refused.get("function"):
                fact = fact_at_call(target.code, _bound_locals(fn, args, kwargs))
                if fact.subject is not None or fact.source:
                    return fact
        except (DynascopeError, TypeError, ValueError):
            pass
    failures = [records.parse_failure(r) for r in refused.get("reasons") or []]
    fact = RecompileFact(str(refused.get("function") or "?"), refused.get("file"), None, None, "a guard failed")
    if failures:
        _fill(fact, failures[0], {})
        user = user_line_of(refused["reasons"][0].split(":", 1)[-1], refused.get("file"))
        if user is not None and user.file:
            fact.source, fact.code = f"{_short(user.file)}:{user.line}", (user.code or "").strip()
    return fact


def _bound_locals(fn: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    import inspect

    signature = inspect.signature(fn)
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def fact_at_call(code: types.CodeType, f_locals: dict[str, Any]) -> RecompileFact:
    """Why calling `code` with these locals misses every cache entry: the newest entry's failed guard."""
    entries = _torch.cache_entries(code)
    failure = None
    for entry in entries:  # newest first
        text = _torch.guard_fail_reason(entry, f_locals)
        failures = [records.parse_failure(t) for t in records.split_reasons(text)] if text else []
        if failures:
            failure = failures[0]
            failure.compile_id = failure.compile_id or _torch.entry_compile_id(entry)
            break
    fact = RecompileFact(code.co_name, code.co_filename, code.co_firstlineno, None, "a guard failed")
    if failure is None:
        fact.suggestion = recompile_fix(None)  # nothing known of the guard: where to look
        return fact
    _fill(fact, failure, _guard_groups(code))
    if fact.new is None and fact.subject in f_locals and _plain(f_locals[fact.subject]):
        fact.new = repr(f_locals[fact.subject])
    return fact


def recompiles(fn: Any) -> list[RecompileFact]:
    """The recompilations of a compiled function so far (from the compile records torch keeps in
    process), oldest first, each with its failed guard, old and new value, user line and suggestion."""
    _torch.check_recompile_reasons_kept()
    code = resolve(fn).code
    groups = _guard_groups(code)
    out = []
    for row in _torch.compilation_metrics():
        if (row.get("co_name"), row.get("co_filename")) != (code.co_name, code.co_filename):
            continue
        recompile = records.recompile(row)
        if recompile is None or not recompile.failures:
            continue
        failure = recompile.failures[0]
        fact = RecompileFact(code.co_name, code.co_filename, code.co_firstlineno, failure.compile_id, "a guard failed")
        _fill(fact, failure, groups)
        if fact.new is None:  # the new cache entry guards on the value it was compiled for
            fact.new = _guarded_value(groups.get(str(row.get("compile_id"))), fact.subject)
        out.append(fact)
    return out


def _fill(fact: RecompileFact, failure: RecompileFailure, groups: dict[str, list[GuardGroup]]) -> None:
    fact.compile_id = failure.compile_id or fact.compile_id
    fact.guard, fact.subject = failure.reason.removeprefix("guard failed: "), failure.subject
    fact.old, fact.new = failure.expected, failure.actual
    at = re.search(r"(size|stride) mismatch at index (\d+)", failure.reason)
    if at and failure.subject:  # the values are one dimension's, not the tensor's
        fact.subject = f"{failure.subject}.{at.group(1)}({at.group(2)})"
    group = _group_of(groups.get(fact.compile_id or ""), failure.subject)
    user = group.user_line() if group is not None else None
    if user is not None and user.file:
        fact.source, fact.code = f"{_short(user.file)}:{user.line}", (user.code or "").strip()
    fact.suggestion = suggestion(failure)


def _guard_groups(code: types.CodeType) -> dict[str, list[GuardGroup]]:
    """Each current cache entry's guard groups, by compile id."""
    try:
        explanation = explain_code(code, globals_for_code(code))
    except DynascopeError:
        return {}
    return {entry.compile_id: entry.guards for entry in explanation.cache_entries}


def _group_of(groups: list[GuardGroup] | None, subject: str | None) -> GuardGroup | None:
    if not groups or not subject:
        return None
    root = _NAME.match(subject)
    names = {subject, root.group(0) if root else subject}
    return next((g for g in groups if g.subject in names), None)


def _guarded_value(groups: list[GuardGroup] | None, subject: str | None) -> str | None:
    """What a cache entry's guards pin `subject` to: "n == 3" -> "3"; a type check only ("type(n) is
    int": the recompile made it dynamic) -> "any int (now dynamic)"."""
    group = _group_of(groups, subject)
    for guard in group.guards if group is not None else []:
        m = re.match(rf"^{re.escape(subject or '')}\s*==\s*(.+)$", guard.text)
        if m:
            return m.group(1).strip()
    for guard in group.guards if group is not None else []:
        m = re.match(rf"^type\({re.escape(subject or '')}\) is (.+)$", guard.text)
        if m:  # "int" (2.13), "the type seen at compile time" (2.8)
            kind = m.group(1).strip()
            named = kind if _NAME.fullmatch(kind) else "value of its type"
            return f"any {named} (now dynamic)"
    return None


def suggestion(failure: RecompileFailure) -> str:
    """One thing to try for this kind of guard failure (analyze/fixes.py has the wording)."""
    return recompile_fix(failure.reason, failure.subject, failure.expected)


def _plain(value: Any) -> bool:
    return isinstance(value, (int, float, bool, str, type(None)))


def _short(path: str | None) -> str:
    return (path or "").rsplit("/", 1)[-1]
