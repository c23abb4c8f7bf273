"""Annotated `dis` listing for code the decompiler cannot handle."""

from __future__ import annotations

import dis
import io
import sys
from types import CodeType


def dis_listing(code: CodeType, reason: str) -> str:
    out = io.StringIO()
    out.write(f"# dynascope could not decompile {code.co_name} ({code.co_filename}:{code.co_firstlineno})\n")
    out.write(f"# reason: {reason}\n")
    out.write(f"# python {sys.version_info.major}.{sys.version_info.minor}; bytecode follows\n")
    out.write(f"# arguments: {code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]}\n")
    dis.dis(code, file=out, depth=0)
    return out.getvalue()
