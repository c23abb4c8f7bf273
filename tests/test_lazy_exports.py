"""The import rule where import-linter cannot see it. `lint-imports` (contracts in pyproject.toml)
checks every import statement, those inside functions included; names that a package exports through
its lazy `__getattr__` (_lazy.py) are imported by importlib at run time instead. Two rules keep them
inside what the contracts check: a package's lazy exports come from its own modules or from modules
its modules already import (an edge the contracts have seen), and the layered packages take only
eagerly defined names from the root package (whose lazy exports reach everything)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "dynascope"
LAYERED = ("trace", "capture", "explain", "analyze", "render")


def _lazy_exports(init: Path) -> dict[str, str]:
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(package: Path) -> set[str]:
    """Every module the package's modules import (relative imports resolved), and `module.name` for
    each `from module import name`, so that an imported submodule is found too."""
    found: set[str] = set()
    for path in package.rglob("*.py"):
        here = _module_name(path).split(".")
        if path.name != "__init__.py":
            here = here[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = ".".join([*here[: len(here) - node.level + 1], node.module or ""] if node.level else [node.module or ""])
                base = base.strip(".")
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def test_lazy_exports_add_no_import_the_contracts_have_not_seen():
    packages = [p.parent for p in SRC.glob("*/__init__.py")]
    assert packages
    for package in packages:
        name = _module_name(package / "__init__.py")
        exports = _lazy_exports(package / "__init__.py")
        imported = _imported(package) if exports else set()
        for export, module in exports.items():
            assert module.startswith(f"{name}.") or module in imported, (
                f"{name}.{export} is exported lazily from {module}, which no module of {name} imports"
            )


def test_layered_packages_take_no_lazy_name_from_the_root_package():
    lazy = set(_lazy_exports(SRC / "__init__.py"))
    assert lazy
    for layer in LAYERED:
        for path in (SRC / layer).rglob("*.py"):
            depth = len(path.relative_to(SRC).parts)  # `from ..` reaches the root from capture/x.py
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and (
                    (node.level == depth and not node.module) or (node.level == 0 and node.module == "dynascope")
                ):
                    taken = {alias.name for alias in node.names} & lazy
                    assert not taken, f"{path.relative_to(SRC)}:{node.lineno} takes {taken} from the root package"
