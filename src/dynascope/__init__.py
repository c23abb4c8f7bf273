"""dynascope: see inside torch.compile.

The public API, re-exported here and nowhere else. Names resolve lazily so that `import dynascope`
stays cheap and analysis works on machines without torch.
"""

from __future__ import annotations

from dynascope._lazy import lazy_exports
from dynascope._version import __version__
from dynascope.errors import DynascopeError
from dynascope.trace import installers as _installers

_EXPORTS = {
    # tracing
    "session": "dynascope.trace.session",
    "TraceSession": "dynascope.trace.session",
    "current_session": "dynascope.trace.session",
    "region": "dynascope.trace.regions",
    "backend": "dynascope.capture.backend",
    "compile": "dynascope.capture.backend",
    # explaining
    "explain": "dynascope.explain.api",
    "Explanation": "dynascope.artifacts.explanation",
    "decompile": "dynascope.decompiler",
    "observe": "dynascope.explain.observer",
    "why_recompile": "dynascope.explain.api",
    # debugging
    "bisect": "dynascope.debug.bisect.search",
    "BisectResult": "dynascope.debug.bisect.result",
    "no_recompiles": "dynascope.debug.recompiles",
    "recompiles": "dynascope.debug.recompiles",
    "RecompileError": "dynascope.debug.recompiles",
    "compile_profile": "dynascope.debug.compile_profile",
    "CompileProfile": "dynascope.artifacts.compile_profile",
    "stepping": "dynascope.debug.stepping",
    "Stepping": "dynascope.debug.stepping",
    "compare_eager": "dynascope.debug.compare_eager",
    "EagerComparison": "dynascope.debug.compare_eager",
    # analysing
    "read_trace": "dynascope.analyze.read.reader",
    "summarize": "dynascope.analyze.pipeline",
    "summarize_files": "dynascope.analyze.pipeline",
    "diff_summaries": "dynascope.analyze.summary_diff",
    "Summary": "dynascope.analyze.summary",
}

__all__ = ["DynascopeError", "__version__", *_EXPORTS]  # noqa: PLE0604 - the keys: names, all str


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


def _capture_installers() -> list:
    from dynascope.capture.installers import torch_side_installers

    return torch_side_installers()


_installers.register(_capture_installers)  # what a trace session installs where torch is imported
