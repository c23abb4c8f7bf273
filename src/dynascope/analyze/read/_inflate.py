"""Streaming gzip inflation of multi-member files, with the fastest inflater installed.

`python-isal` (ISA-L) inflates ~2.8x faster than the stdlib zlib here, `zlib-ng` ~2x; both are optional.
All three release the GIL, so files can be inflated in parallel threads.
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import Iterator
from types import ModuleType

_igzip_lib: ModuleType | None
try:  # pragma: no cover - depends on the environment
    from isal import igzip_lib as _igzip_lib
except ImportError:  # pragma: no cover
    _igzip_lib = None


def _optional(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:  # pragma: no cover
        return None


_zlib_ng = _optional("zlib_ng.zlib_ng")  # used when installed; not a dependency

GZIP_MAGIC = b"\x1f\x8b"
# Output bound per inflate call: keeps memory flat however large a member is.
_MAX_OUT = 8 << 20


class Truncated(Exception):
    """The gzip stream ended inside a member (or has garbage after the last whole member)."""


def backend_name() -> str:
    if _igzip_lib is not None:
        return "isal"
    if _zlib_ng is not None:
        return "zlib-ng"
    return "zlib"


def inflate(data: bytes, backend: str | None = None) -> Iterator[bytes]:
    """Yield the inflated bytes of every gzip member of `data` in order.

    Raises Truncated (after yielding everything that could be inflated) when the last member is cut
    short or trailing bytes are not a gzip member.
    """
    backend = backend or backend_name()
    if backend == "isal":
        yield from _inflate_isal(data)
    else:
        yield from _inflate_zlib(_zlib_ng if backend == "zlib-ng" else zlib, data)


def _inflate_zlib(mod, data: bytes) -> Iterator[bytes]:
    while data:
        if not data.startswith(GZIP_MAGIC):
            if data.strip(b"\x00") == b"":
                return  # zero padding after the last member (preallocated file): harmless
            raise Truncated("bytes after the last gzip member are not gzip")
        d = mod.decompressobj(31)
        buf = data
        while True:
            try:
                out = d.decompress(buf, _MAX_OUT)
            except mod.error as exc:
                raise Truncated(f"corrupt gzip member: {exc}") from None
            if out:
                yield out
            if d.eof:
                data = d.unused_data
                break
            buf = d.unconsumed_tail
            if not buf and not out:
                raise Truncated("gzip member cut short")


def _inflate_isal(data: bytes) -> Iterator[bytes]:
    lib = _igzip_lib
    if lib is None:
        raise ValueError("the isal backend needs the isal package")
    while data:
        if not data.startswith(GZIP_MAGIC):
            if data.strip(b"\x00") == b"":
                return
            raise Truncated("bytes after the last gzip member are not gzip")
        d = lib.IgzipDecompressor(flag=lib.DECOMP_GZIP)
        try:
            out = d.decompress(data, _MAX_OUT)
            while True:
                if out:
                    yield out
                if d.eof:
                    data = d.unused_data
                    break
                if d.needs_input:
                    raise Truncated("gzip member cut short")
                out = d.decompress(b"", _MAX_OUT)
        except lib.IsalError as exc:
            raise Truncated(f"corrupt gzip member: {exc}") from None
