"""Replace every function of a module with its decompiled-and-recompiled self (see run.py)."""

from __future__ import annotations
import __future__

import ast
import functools
import importlib.abc
import inspect
import linecache
import operator
import os
import re
import sys
import types
from pathlib import Path

from dynascope.decompiler import DecompileError, decompile

FUTURE_FLAGS = functools.reduce(operator.or_, (getattr(__future__, f).compiler_flag for f in __future__.all_feature_names))
SOURCE_DIR = "STDLIB_ROUNDTRIP_SOURCES"  # environment variable: where decompiled sources are written
OUTER, CLASS = "__roundtrip_outer__", "__roundtrip_class__"
# flags a replacement code object must share with the original (what kind of function it is)
KIND_FLAGS = (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_VARARGS
              | inspect.CO_VARKEYWORDS | inspect.CO_ITERABLE_COROUTINE)


class SwapFailed(Exception):
    """The recompiled code cannot stand in for the original."""


class Swapper(importlib.abc.MetaPathFinder):
    """Swaps the named modules now (if imported) and whenever they are imported (again)."""

    def __init__(self, modules):
        self.modules = set(modules)
        self.seen: dict[str, dict] = {}  # module -> qualname -> outcome, over every import of it

    def install(self) -> None:
        for name in sorted(self.modules):
            if name in sys.modules:
                self.swap_module(sys.modules[name])
        sys.meta_path.insert(0, self)

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.modules:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _SwappingLoader(spec.loader, self)
                return spec
        return None

    def swap_module(self, module) -> None:
        outcomes = self.seen.setdefault(module.__name__, {})
        replacements = []
        for qualname, func in functions_of(module):
            try:
                source = decompile(func.__code__)
            except DecompileError as exc:
                outcomes[qualname] = ("refused", str(exc))
                continue
            try:
                replacements.append((func, recompiled(func.__code__, source)))
                outcomes.setdefault(qualname, ("swapped", ""))
            except (SwapFailed, SyntaxError) as exc:
                outcomes[qualname] = ("swap_failed", f"{type(exc).__name__}: {exc}")
        for func, code in replacements:  # all at once: the decompiler may use the module itself
            func.__code__ = code

    def stats(self) -> dict:
        """Counts over every function seen in any import of the modules (a C accelerator hides
        pure-Python functions from the first import; a fresh import without it shows them)."""
        total = {"functions": 0, "decompiled": 0, "refused": 0, "swap_failed": 0, "refusals": {}, "swap_failures": {}}
        for module, outcomes in sorted(self.seen.items()):
            prefix = "" if len(self.modules) == 1 else module + "."
            for qualname, (kind, reason) in outcomes.items():
                total["functions"] += 1
                total["decompiled"] += kind != "refused"
                if kind == "refused":
                    total["refused"] += 1
                    total["refusals"][prefix + qualname] = reason
                elif kind == "swap_failed":
                    total["swap_failed"] += 1
                    total["swap_failures"][prefix + qualname] = reason
        return total


class _SwappingLoader(importlib.abc.Loader):
    def __init__(self, loader, swapper: Swapper):
        self._loader, self._swapper = loader, swapper

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = self._loader
        self._loader.exec_module(module)
        self._swapper.swap_module(module)

    def __getattr__(self, attr):
        return getattr(self._loader, attr)


# ---- which functions ------------------------------------------------------------------------------
def functions_of(module):
    """(qualname, function) for every function whose code lives in the module's file."""
    filenames = {getattr(module, "__file__", None), f"<frozen {module.__name__}>"}  # 3.11+ freezes posixpath...
    seen: dict[int, tuple] = {}
    visited_classes: set[int] = set()

    def add(value, depth=0):
        if depth > 4:
            return
        if isinstance(value, types.FunctionType):
            if value.__code__.co_filename in filenames and id(value) not in seen:
                seen[id(value)] = (value.__qualname__, value)
            wrapped = getattr(value, "__wrapped__", None)
            if wrapped is not None:
                add(wrapped, depth + 1)
            return
        if isinstance(value, (staticmethod, classmethod)):
            add(value.__func__, depth + 1)
        elif isinstance(value, property):
            for part in (value.fget, value.fset, value.fdel):
                add(part, depth + 1)
        elif isinstance(value, type):
            if value.__module__ == module.__name__ and id(value) not in visited_classes:
                visited_classes.add(id(value))
                for member in list(vars(value).values()):
                    add(member, depth + 1)
        else:
            for attr in ("__wrapped__", "func", "fget"):  # lru_cache, cached_property, partialmethod...
                inner = getattr(type(value), attr, None) is None and _plain_attr(value, attr)
                if inner is not None and inner is not False:
                    add(inner, depth + 1)
            registry = _plain_attr(value, "registry")
            if registry is not None and hasattr(registry, "values"):  # singledispatch
                for impl in list(registry.values()):
                    add(impl, depth + 1)

    for value in list(vars(module).values()):
        add(value)
    return sorted(seen.values(), key=lambda item: (item[1].__code__.co_firstlineno, item[0]))


def _plain_attr(value, attr):
    try:
        return object.__getattribute__(value, attr)
    except Exception:  # noqa: BLE001 - anything without the attribute, or that refuses it
        return None


# ---- recompiling ----------------------------------------------------------------------------------
def recompiled(original: types.CodeType, source: str) -> types.CodeType:
    """Compile `source` (a decompiled `def`) so that its code has the original's free variables
    in the same order (and the `__class__` cell of a method using zero-argument super())."""
    node = _the_def(ast.parse(source).body[0])
    free = list(original.co_freevars)
    wrapped: list[ast.stmt] = [node]
    if "__class__" in free:
        wrapped = [ast.ClassDef(name=CLASS, bases=[], keywords=[], body=wrapped, decorator_list=[], type_params=[])]
    cells = [n for n in free if n != "__class__"]
    prologue = [ast.Assign(targets=[ast.Name(id=n, ctx=ast.Store()) for n in cells], value=ast.Constant(None))] if cells else []
    if node.name not in free and "__class__" not in free:  # a recursive call reads a global, as it did
        prologue.insert(0, ast.Global(names=[node.name]))
    outer = ast.FunctionDef(name=OUTER, args=_no_args(), body=prologue + wrapped, decorator_list=[], returns=None,
                            type_params=[])
    module = ast.fix_missing_locations(ast.Module(body=[outer], type_ignores=[]))
    text = ast.unparse(module) + "\n"
    filename = _source_file(original, text)
    # the original's `from __future__` flags, not this module's (exec() inside inherits them)
    code = compile(text, filename, "exec", flags=original.co_flags & FUTURE_FLAGS, dont_inherit=True)
    new = _find_code(code, [OUTER] + ([CLASS] if "__class__" in free else []) + [node.name])
    _check_compatible(original, new)
    changes = {"co_name": original.co_name}
    if sys.version_info >= (3, 11):
        changes["co_qualname"] = original.co_qualname
    return new.replace(**changes)


def _source_file(original: types.CodeType, text: str) -> str:
    """Tracebacks (and tests that read them) show the decompiled source: it is written to a file
    in the worker's scratch directory (SOURCE_DIR), or given to linecache when there is none."""
    qualname = original.co_qualname if sys.version_info >= (3, 11) else original.co_name
    stem = re.sub(r"[^A-Za-z0-9_.]", "_", f"{Path(original.co_filename).stem}.{qualname}")
    directory = os.environ.get(SOURCE_DIR)
    if not directory:
        filename = f"<decompiled {stem}>"
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
        return filename
    path = Path(directory) / f"{stem}.{original.co_firstlineno}.py"
    path.write_text(text)
    return str(path)


def _the_def(node: ast.stmt) -> ast.FunctionDef:
    """decompile() wraps a function that assigns free variables in `def __closure_<name>(...)`."""
    if (isinstance(node, ast.FunctionDef) and node.name.startswith("__closure_") and len(node.body) == 2
            and isinstance(node.body[0], (ast.FunctionDef, ast.AsyncFunctionDef))):
        return node.body[0]
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise SwapFailed(f"decompiled source is a {type(node).__name__}, not a def")
    return node


def _no_args() -> ast.arguments:
    return ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])


def _find_code(code: types.CodeType, path: list[str]) -> types.CodeType:
    for wanted in path:
        matches = [c for c in code.co_consts if isinstance(c, types.CodeType) and c.co_name == wanted]
        if len(matches) != 1:
            raise SwapFailed(f"cannot find the compiled code of {wanted}")
        code = matches[0]
    return code


def _check_compatible(old: types.CodeType, new: types.CodeType) -> None:
    if new.co_freevars != old.co_freevars:
        raise SwapFailed(f"free variables {new.co_freevars} instead of {old.co_freevars}")
    for attr in ("co_argcount", "co_posonlyargcount", "co_kwonlyargcount"):
        if getattr(new, attr) != getattr(old, attr):
            raise SwapFailed(f"{attr} {getattr(new, attr)} instead of {getattr(old, attr)}")
    count = old.co_argcount + old.co_kwonlyargcount + bool(old.co_flags & inspect.CO_VARARGS) \
        + bool(old.co_flags & inspect.CO_VARKEYWORDS)
    if new.co_varnames[:count] != old.co_varnames[:count]:
        raise SwapFailed(f"parameters {new.co_varnames[:count]} instead of {old.co_varnames[:count]}")
    if new.co_flags & KIND_FLAGS != old.co_flags & KIND_FLAGS:
        raise SwapFailed(f"code flags {new.co_flags & KIND_FLAGS:#x} instead of {old.co_flags & KIND_FLAGS:#x}")
