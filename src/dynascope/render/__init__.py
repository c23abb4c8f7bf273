"""Showing traces: terminal tables, the self-contained HTML report, Chrome-trace (Perfetto) JSON.

    from dynascope.render import render_summary, render_short, write_html, convert

    render_short(summary)                       # end-of-run summary (dynascope demo / run)
    render_summary(summary)                     # every table, as `dynascope report` prints it
    write_html(summary, "report.html", explanation=find_explanation([trace]))
    convert([trace], "trace.json")              # Perfetto / chrome://tracing

Renders `dynascope.analyze.summary.Summary` objects; imports analysis, never torch.
Names resolve lazily, so importing this package costs nothing until one is used.
"""

from __future__ import annotations

from dynascope._lazy import lazy_exports

_EXPORTS = {
    "render_summary": "dynascope.render.terminal",
    "render_short": "dynascope.render.terminal",
    "summary_text": "dynascope.render.terminal",
    "short_text": "dynascope.render.terminal",
    "make_console": "dynascope.console",
    "render_html": "dynascope.render.html",
    "write_html": "dynascope.render.html",
    "find_explanation": "dynascope.artifacts.run_dir",
    "load_explanation": "dynascope.artifacts.run_dir",
    "convert": "dynascope.render.chrome",
    "ConvertStats": "dynascope.render.chrome",
    "diff_tables": "dynascope.render.diff_view",
    "render_diff": "dynascope.render.diff_view",
    "summarize_paths": "dynascope.render._analysis",
    "summary_to_dict": "dynascope.render._analysis",
    "write_csv": "dynascope.render._analysis",
}

__all__ = list(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
