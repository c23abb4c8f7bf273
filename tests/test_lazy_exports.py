"""The import rule where import-linter cannot see it. `lint-imports` (contracts in pyproject.toml)
checks every import statement, those inside functions included; names that a package exports through
its lazy `__getattr__` (_lazy.py) are imported by importlib at run time instead, so two rules keep them
from crossing layers: a package's lazy exports come from inside that package, and the layered
packages take only eagerly defined names from the root package (whose lazy exports reach everything)."""

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


def test_a_package_exports_lazily_only_from_its_own_modules():
    packages = [p.parent for p in SRC.glob("*/__init__.py")]
    assert packages
    for package in packages:
        prefix = f"dynascope.{package.name}."
        for name, module in _lazy_exports(package / "__init__.py").items():
            assert module.startswith(prefix), f"{prefix}{name} is exported lazily from {module}"


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
