"""An explanation as files: explanation.json and, beside it, one .py file per compiled function (its
transformed code decompiled, each subgraph's code, guards as comments), as `dynascope run` and
`dynascope explain --out DIR` write them."""

from __future__ import annotations

import os
import re

from dynascope.artifacts.explanation import CacheEntry, Explanation, Report
from dynascope.artifacts.run_dir import EXPLANATION_FILE
from dynascope.render.explanation_text import render_guards, render_observations


def write_explanation(report: Report, out_dir: str) -> list[str]:
    """DIR/explanation.json and one .py file per compiled function beside it; the paths written."""
    written = []
    used: set[str] = set()
    for expl in report.explanations:
        base = re.sub(r"[^A-Za-z0-9_]+", "_", expl.function.qualname or expl.function.name).strip("_") or "function"
        name, n = base, 1
        while name in used:
            n += 1
            name = f"{base}_{n}"
        used.add(name)
        path = os.path.join(out_dir, f"{name}.py")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(function_file(expl, report.torch_version))
        written.append(path)
    path = os.path.join(out_dir, EXPLANATION_FILE)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(report.to_json())
        fh.write("\n")
    written.append(path)
    return written


def _comment(text: str, prefix: str = "# ") -> str:
    return "\n".join((prefix + line).rstrip() for line in text.splitlines())


def function_file(expl: Explanation, torch_version: str | None) -> str:
    fn = expl.function
    out: list[str] = [
        f'"""What Dynamo did to {fn.qualname or fn.name} ({fn.where()}), torch {torch_version or "?"}.',
        "",
        "Written by `dynascope explain`. Cache entries are listed in the order Dynamo checks them; each",
        "runs only when all its guards pass. Code Dynamo generated is shown as Python where it could be",
        'decompiled; everything else (guards, original source, bytecode) is in comments."""',
        "",
        "import torch  # noqa: F401  (the subgraphs below refer to it)",
        "",
    ]
    if expl.source:
        out += ["# ---- original source ----", _comment(expl.source), ""]
    _entries_py(expl, out, prefix="", user_file=fn.file)
    if expl.graph_breaks or expl.recompiles or expl.compile_times:
        out += ["", "# ---- what happened ----", _comment(render_observations(expl))]
    return "\n".join(out).rstrip() + "\n"


def _entries_py(expl: Explanation, out: list[str], prefix: str, user_file: str | None) -> None:
    for entry in expl.cache_entries:
        _entry_py(entry, out, prefix, user_file)


def _entry_py(entry: CacheEntry, out: list[str], prefix: str, user_file: str | None) -> None:
    tag = f"{prefix}cache entry {entry.index}"
    out += [
        f"# ==== {tag}: compile id {entry.compile_id}, backend {entry.backend or '?'} ====",
        f"# guards ({entry.guard_count} checks; this entry runs only if all pass):",
        _comment(render_guards(entry, user_file), "#   "),
        "# torch's own guard text:",
    ]
    for group in entry.guards:
        for g in group.guards:
            out.append(_comment(g.raw, "#   "))
    out.append("")
    if entry.code is not None:
        out.append(f"# transformed code ({'decompiled' if entry.code.decompiled else 'bytecode'}):")
        out.append(entry.code.source if entry.code.decompiled else _comment(entry.code.source))
        out.append("")
    for sg in entry.subgraphs:
        ops = f", {sg.op_count} ops" if sg.op_count is not None else ""
        out.append(f"# subgraph {sg.name} ({sg.global_name}{ops}):")
        if sg.fx_code:
            code = sg.fx_code.replace("class GraphModule(torch.nn.Module):", f"class {sg.name}(torch.nn.Module):", 1)
            out.append(code if _parses(code) else _comment(code))
        else:
            out.append("# (FX code not available)")
        out.append("")
    for rf in entry.resume_functions:
        out.append(f"# resume function {rf.name} ({rf.code_name}), resumes at line {rf.line}:")
        if rf.source:
            out.append(_comment(rf.source))
        if rf.explanation is not None:
            _entries_py(rf.explanation, out, prefix=f"{prefix}{rf.name} ", user_file=user_file)
        else:
            out.append("#   (no cache entries: this path has not run)")
        out.append("")


def _parses(code: str) -> bool:
    try:
        compile(code, "<fx>", "exec")
    except SyntaxError:
        return False
    return True


