"""What Dynamo did: cache entries, guards, decompiled code, subgraphs, resume functions, graph breaks,
recompiles and compile times.

Nothing here imports torch at import time (the decompiler must import without torch). The public names
resolve lazily. `dynascope.explain` is both this package and the function `explain(fn)`: once the
package is imported it shadows the function on `dynascope`, so the package itself is callable and
forwards to `explain.api.explain`.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

from dynascope._lazy import lazy_exports

_EXPORTS = {
    "explain": "dynascope.explain.api",
    "why_recompile": "dynascope.explain.api",
    "RecompileCheck": "dynascope.explain.api",
    "NotCompiledError": "dynascope.explain.api",
    "Explanation": "dynascope.artifacts.explanation",
    "Report": "dynascope.artifacts.explanation",
    "observe": "dynascope.explain.observer",
    "start_observing": "dynascope.explain.observer",
    "stop_observing": "dynascope.explain.observer",
    "Observer": "dynascope.explain.observer",
    "decompile": "dynascope.decompiler",
}

__all__ = list(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


# Kept on purpose (issue 27 weighed renaming the package instead): `from dynascope.explain import explain,
# why_recompile, observe` is public API, and `dynascope.explain(fn)` is the one call users learn first. Once
# this package is imported, Python binds it as the attribute `explain` of `dynascope`, hiding the function
# of that name; a callable package keeps both meanings, at the cost of this one class swap.
class _CallablePackage(types.ModuleType):
    def __call__(self, fn: Any, **kwargs: Any) -> Any:
        return importlib.import_module("dynascope.explain.api").explain(fn, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
