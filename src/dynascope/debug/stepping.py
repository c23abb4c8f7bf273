"""Stepping through what Dynamo runs: its transformed code as decompiled `.py` files that really run.

`with dynascope.stepping("dynascope-debug"):` (and `dynascope debug SCRIPT`) hooks every frame Dynamo
compiles, main frames and resume functions alike. Each transformed code object is decompiled, written
to `<out_dir>/<code name>_<n>.py`, and compiled from that file, so the code object's file and line
numbers are the file's: pdb's `b file:line`, an IDE's breakpoints (sys.settrace) and `breakpoint()`
lines added to the file stop there when the compiled function runs, with its locals.

A decompiled function is installed in Dynamo's cache entry only when decompiler/equivalence.py finds it
does the same observable things in the same order as Dynamo's bytecode; otherwise Dynamo's own code
runs, the file says why at its top, and the result lists it as not installed. A decompiler mistake
can therefore not change what the program computes.
"""

from __future__ import annotations

import ast
import difflib
import os
import re
import sys
import types
from dataclasses import asdict, dataclass, field
from typing import Any

from dynascope import _torch
from dynascope.decompiler import equivalence
from dynascope.errors import ConfigError, DynascopeError, TorchVersionError

RESUME_PREFIX = "torch_dynamo_resume_in_"
_UUID = r"_[0-9a-f]{8}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{12}"
_DYNAMO_NUMBERS = re.compile(rf"\b(__[A-Za-z_]+?)(_+\d+)+({_UUID})?\b")
_BREAKPOINT = "breakpoint()"
HEADER_START = "# dynascope debug: "


@dataclass
class SteppedCode:
    """One code object Dynamo generated, and what stepping mode did with it."""

    code_name: str  # the code object's name (a resume function's is torch_dynamo_resume_in_<fn>_at_<line>)
    function: str  # the user's function or resume function, as file:line
    kind: str  # "frame" or "resume function"
    compile_id: str | None
    path: str  # the written .py file
    installed: bool  # the decompiled code runs in place of Dynamo's
    reason: str | None = None  # why it is not installed
    first_line: int | None = None  # the `def` line in the file
    breakpoints: list[int] = field(default_factory=list)  # lines of breakpoint() calls kept from an edit

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Stepping:
    """Run decompiled source in place of Dynamo's bytecode while active (a context manager).

    `out_dir` receives one `.py` per compiled code object; `.results` lists them in compile order.
    Files from an earlier run are rewritten, keeping `breakpoint()` lines you added to them where the
    code around them is unchanged.
    """

    def __init__(self, out_dir: str | os.PathLike[str] = "dynascope-debug"):
        self.out_dir = os.path.abspath(os.fspath(out_dir))
        self.results: list[SteppedCode] = []
        self.notes: list[str] = []
        self._counts: dict[str, int] = {}
        self._remove: Any = None

    # ---- lifetime ----------------------------------------------------------------------------------

    def start(self) -> Stepping:
        if self._remove is not None:
            return self
        try:
            os.makedirs(self.out_dir, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create the stepping directory {self.out_dir}: {exc.strerror or exc}") from exc
        _torch.require_torch()
        self._remove = _torch.register_replacing_bytecode_hook(self._hook)
        if equivalence.VERSION not in equivalence.VERIFIED:
            self._note(f"Python {sys.version_info[0]}.{sys.version_info[1]}: the equivalence check was verified on "
                       + ", ".join(f"{a}.{b}" for a, b in sorted(equivalence.VERIFIED))
                       + " only, so Dynamo's own code runs everywhere; the files are for reading")
        return self

    def stop(self) -> None:
        if self._remove is not None:
            self._remove()
            self._remove = None

    def __enter__(self) -> Stepping:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def installed(self) -> list[SteppedCode]:
        return [r for r in self.results if r.installed]

    @property
    def kept(self) -> list[SteppedCode]:
        return [r for r in self.results if not r.installed]

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    # ---- the hook ------------------------------------------------------------------------------------

    def _hook(self, code: types.CodeType, new_code: types.CodeType) -> types.CodeType | None:
        try:
            return self._replace(code, new_code)
        except Exception as exc:  # noqa: BLE001 - the program must run on, with Dynamo's own code
            self._note(f"{code.co_name}: stepping failed ({type(exc).__name__}: {exc}); Dynamo's code runs")
            return None

    def _replace(self, code: types.CodeType, new_code: types.CodeType) -> types.CodeType | None:
        if (_read(new_code.co_filename) or "").startswith(HEADER_START):
            return None  # another stepping hook (a nested `with stepping(...)`) installed it already
        name = new_code.co_name
        self._counts[name] = self._counts.get(name, 0) + 1
        safe = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_") or "code"
        path = os.path.join(self.out_dir, f"{safe}_{self._counts[name]}.py")
        try:
            compile_id = _torch.current_compile_id()
        except TorchVersionError:
            compile_id = None
        kind = "resume function" if name.startswith(RESUME_PREFIX) else "frame"
        record = SteppedCode(code_name=name, function=f"{code.co_filename}:{code.co_firstlineno}", kind=kind,
                             compile_id=compile_id, path=path, installed=False)
        self.results.append(record)
        ours, text = None, None
        try:
            body = _decompiled(new_code)
        except Exception as exc:  # noqa: BLE001 - any decompiler failure: keep Dynamo's code
            record.reason = f"not decompiled ({type(exc).__name__}: {exc})"
        else:
            try:
                text, ours, record.reason = self._build(record, code, new_code, body, path)
            except Exception as exc:  # noqa: BLE001 - a bug of ours must leave Dynamo's code in place
                text, ours, record.reason = None, None, f"stepping failed ({type(exc).__name__}: {exc})"
        if ours is None or text is None:
            _write(path, _header(record, code) + _bytecode_comment(new_code))
            return None
        record.installed = True
        _write(path, text)
        return ours

    def _build(self, record: SteppedCode, code: types.CodeType, new_code: types.CodeType, body: str,
               path: str) -> tuple[str | None, types.CodeType | None, str | None]:
        """(file text, code to install, None) or (None, None, why not)."""
        record.installed = True  # the header describes the file as it will be if all checks pass
        header = _header(record, code)
        record.installed = False
        text = header + body
        previous = _read(path)
        if previous is not None:
            text, record.breakpoints = _keep_breakpoints(previous, text)
        checked_text = _without_breakpoints(text, record.breakpoints)
        checked, why = _compile_function(checked_text, path, new_code)
        if checked is None:
            return None, None, why
        why = equivalence.check(new_code, checked)
        if why is not None:
            return None, None, why
        if record.breakpoints:
            ours, why = _compile_function(text, path, new_code)
            if ours is None:
                return None, None, why
        else:
            ours = checked
        if sys.version_info >= (3, 11):
            ours = ours.replace(co_qualname=new_code.co_qualname)
        record.first_line = ours.co_firstlineno
        return text, ours, None


# --------------------------------------------------------------------------------------------------
# Source, files, compiling
# --------------------------------------------------------------------------------------------------


def _decompiled(new_code: types.CodeType) -> str:
    """The decompiled `def`, with a first statement that gives Dynamo's local variables their slots.

    Dynamo's frame evaluation copies the frame's local variables into the transformed code's frame by
    position, so the code installed must keep Dynamo's variable order: `if False: a = b = None` makes
    the compiler number those names first and compiles to nothing but a NOP."""
    from dynascope.decompiler import decompile

    source = decompile(new_code)
    tree = ast.parse(source)
    func = _target_def(tree, new_code)
    nargs = equivalence._total_args(new_code)
    declared = [stmt for stmt in func.body if isinstance(stmt, (ast.Global, ast.Nonlocal))]
    not_local = {n for stmt in declared for n in stmt.names}
    locals_ = [n for n in new_code.co_varnames[nargs:] if n.isidentifier() and n not in not_local]
    if locals_:
        assign = ast.Assign(targets=[ast.Name(id=n, ctx=ast.Store()) for n in locals_], value=ast.Constant(None))
        at = next((i for i, stmt in enumerate(func.body) if not isinstance(stmt, (ast.Global, ast.Nonlocal))),
                  len(func.body))
        func.body.insert(at, ast.If(test=ast.Constant(False), body=[assign], orelse=[]))
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def _target_def(tree: ast.Module, new_code: types.CodeType) -> ast.FunctionDef:
    name = new_code.co_name if new_code.co_name.isidentifier() else "__decompiled__"
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise DynascopeError(f"the decompiled source has no def {name}")


def _compile_function(text: str, path: str, new_code: types.CodeType) -> tuple[types.CodeType | None, str | None]:
    try:
        tree = ast.parse(text, path)
        _preamble_on_def_line(tree, new_code)
        module = compile(tree, path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        return None, f"the decompiled source does not compile ({exc.msg}, line {exc.lineno})"
    name = new_code.co_name if new_code.co_name.isidentifier() else "__decompiled__"
    found = _find_code(module, name)
    if found is None:
        return None, f"no code object {name} in the compiled file"
    if found.co_name != new_code.co_name:
        found = found.replace(co_name=new_code.co_name)
    found = _share_nested_code(found, new_code)
    if found.co_varnames[:len(new_code.co_varnames)] != new_code.co_varnames:
        return None, "the decompiled code cannot keep Dynamo's local variables in order"
    return found, None


def _preamble_on_def_line(tree: ast.Module, new_code: types.CodeType) -> None:
    """The `if False:` preamble compiles to one NOP: give it the `def` line, so that stepping does not
    stop on it."""
    try:
        func = _target_def(tree, new_code)
    except DynascopeError:
        return
    for stmt in func.body:
        if isinstance(stmt, (ast.Global, ast.Nonlocal)):
            continue
        if isinstance(stmt, ast.If) and isinstance(stmt.test, ast.Constant) and stmt.test.value is False:
            for node in ast.walk(stmt):
                if isinstance(node, (ast.stmt, ast.expr)):
                    node.lineno = node.end_lineno = func.lineno
        return


def _share_nested_code(ours: types.CodeType, dynamo: types.CodeType) -> types.CodeType:
    """Functions the code makes (MAKE_FUNCTION) are made from Dynamo's own nested code objects, matched
    by name where each name is one code object on both sides; the check compares them by identity."""
    def by_name(code: types.CodeType) -> dict[str, list[types.CodeType]]:
        found: dict[str, list[types.CodeType]] = {}
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                found.setdefault(const.co_name, []).append(const)
        return found

    theirs, mine = by_name(dynamo), by_name(ours)
    swap = {id(codes[0]): theirs[name][0] for name, codes in mine.items()
            if len(codes) == 1 and len(theirs.get(name, [])) == 1}
    if not swap:
        return ours
    return ours.replace(co_consts=tuple(swap.get(id(c), c) if isinstance(c, types.CodeType) else c
                                        for c in ours.co_consts))


def _find_code(code: types.CodeType, name: str) -> types.CodeType | None:
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            if const.co_name == name:
                return const
            if const.co_name == f"__closure_{name}":
                return _find_code(const, name)
    return None


def _header(record: SteppedCode, code: types.CodeType) -> str:
    what = "resume function" if record.kind == "resume function" else "transformed code"
    lines = [
        f"{HEADER_START}Dynamo's {what} {record.code_name}, compile id {record.compile_id or '?'},",
        f"# for {code.co_name} at {code.co_filename}:{code.co_firstlineno}.",
    ]
    if record.installed:
        lines += [
            "# This decompiled code RUNS in place of Dynamo's bytecode (checked equivalent): breakpoints",
            "# work here (pdb `b this_file:LINE`, an IDE, or a `breakpoint()` line you add; it is kept",
            "# when the file is rewritten). The `if False: ...` at the top of the function compiles to",
            "# nothing: it keeps Dynamo's local variables in their slots.",
        ]
    else:
        lines += ["# NOT INSTALLED: Dynamo's own bytecode runs, so breakpoints here do not stop.",
                  f"# Why: {record.reason}"]
    return "\n".join(lines) + "\n\n"


def _bytecode_comment(new_code: types.CodeType) -> str:
    from dynascope.explain.code import decompile_code

    text, ok = decompile_code(new_code)
    if ok:
        text = "The decompiled code, for reading:\n" + text
    return "\n".join(f"# {ln}".rstrip() for ln in text.splitlines()) + "\n"


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    import linecache

    linecache.checkcache(path)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError:
        return None


def _keep_breakpoints(previous: str, text: str) -> tuple[str, list[int]]:
    """`text` with the `breakpoint()` lines the user added to `previous` (the same file from an earlier
    run) put back, when every line of code matches, line for line (see _comparable)."""
    old, new = previous.splitlines(), text.splitlines()
    norm = [_comparable(ln) for ln in old], [_comparable(ln) for ln in new]
    out: list[str] = []
    added: list[int] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, *norm, autojunk=False).get_opcodes():
        if tag == "equal":
            out += new[j1:j2]
        elif tag == "delete" and all(ln.strip() == _BREAKPOINT for ln in old[i1:i2]):
            for ln in old[i1:i2]:
                out.append(ln)
                added.append(len(out))
        else:  # the code changed since: start afresh
            return text, []
    return "\n".join(out) + "\n", added


def _comparable(line: str) -> str:
    """A line as _keep_breakpoints compares it: comments (the header: compile ids) and the numbers and
    uuids in the names of Dynamo's globals (`__compiled_fn_2_<uuid>`, `__resume_at_82_3`) change from
    run to run."""
    return "#" if line.lstrip().startswith("#") else _DYNAMO_NUMBERS.sub(r"\1", line)


def _without_breakpoints(text: str, lines: list[int]) -> str:
    """The file with the kept breakpoint() lines made `pass`, so that what is checked is the code alone
    (and line numbers stay put)."""
    if not lines:
        return text
    rows = text.split("\n")
    for n in lines:
        rows[n - 1] = rows[n - 1].replace(_BREAKPOINT, "pass", 1)
    return "\n".join(rows)


def stepping(out_dir: str | os.PathLike[str] = "dynascope-debug") -> Stepping:
    """`with dynascope.stepping("dynascope-debug") as s:` runs every function torch.compile compiles in
    the block from decompiled `.py` files in `out_dir`, where breakpoints stop (see docs/debug.md).
    `s.results` says which files run (installed) and why the others keep Dynamo's bytecode."""
    return Stepping(out_dir)
