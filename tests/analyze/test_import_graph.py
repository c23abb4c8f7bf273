"""The import graph: no circles within analyze/, render/, explain/ and capture/; analyze/ never imports
render/ (nor torch: a trace is analysed on machines without it); capture/ and explain/ never import
analyze/ or render/."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "dynascope"


def _imports(package: str) -> dict[str, set[str]]:
    """module -> the dynascope modules it imports (relative imports, anywhere in the file)."""
    graph: dict[str, set[str]] = {}
    for path in sorted((SRC / package).glob("*.py")):
        module = f"{package}.{path.stem}"
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package if node.level == 1 else ""
                if node.module is None:
                    deps.update(f"{base}.{a.name}".strip(".") for a in node.names)
                else:
                    deps.add(f"{base}.{node.module}".strip("."))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                deps.update(n for n in names if n.split(".")[0] == "torch")
        graph[module] = deps - {module}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return path[path.index(node) :] + [node]
        if node in done or node not in graph:
            return None
        for dep in sorted(graph[node]):
            found = visit(dep, path + [node])
            if found:
                return found
        done.add(node)
        return None

    for start in graph:
        found = visit(start, [])
        if found:
            return found
    return None


def test_no_import_circles_in_analyze_and_render():
    graph = {**_imports("analyze"), **_imports("render")}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_analyze_imports_neither_render_nor_torch():
    for module, deps in _imports("analyze").items():
        assert not {d for d in deps if d.startswith(("render", "torch", "capture", "explain"))}, module


def test_no_import_circles_in_explain_and_capture():
    graph = {**_imports("explain"), **_imports("capture")}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_capture_and_explain_import_neither_analyze_nor_render():
    for module, deps in {**_imports("explain"), **_imports("capture")}.items():
        assert not {d for d in deps if d.startswith(("analyze", "render", "debug"))}, module
