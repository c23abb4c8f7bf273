"""From a file's bytes to text a parser can take: whole lines in chunks, and which layout the file has.

Gzip files are inflated member by member (`_inflate`, ISA-L when installed); a cut member keeps every
whole line before the cut and is reported. The bytes after a file's last newline are a whole record, a
torn line (counted, reported) or a one-line file. `sniff` tells JSON lines (DFTracer's layout, with or
without a leading `[`) from one JSON document (Chrome-trace JSON: a `traceEvents` object or an array).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import orjson

from dynascope.analyze.read import _inflate
from dynascope.analyze.read.readinfo import FileLog
from dynascope.errors import TraceFormatError

__all__ = ["CHUNK_BYTES", "document_events", "inflated", "last_piece", "read_bytes", "sniff", "text_chunks"]

CHUNK_BYTES = 16 << 20  # bytes of text parsed at once (module attribute: tests make it small)

LINES, DOCUMENT = "lines", "document"


def read_bytes(path) -> tuple[str, bytes]:
    """(the path as text, the file's bytes), or one clear error."""
    name = str(path)
    try:
        return name, Path(path).read_bytes()
    except OSError as exc:
        raise TraceFormatError(f"{name}: cannot be read ({exc.strerror}); check the path") from None


def inflated(data: bytes, log: FileLog) -> Iterator[bytes]:
    """The inflated pieces of a gzip file; a cut or corrupt member ends them, reported in `log`."""
    try:
        yield from _inflate.inflate(data)
    except _inflate.Truncated as exc:
        log.truncated_gzip = True
        log.warn(f"gzip stream truncated ({exc}); kept every whole line before the cut")


def text_chunks(data: bytes, log: FileLog, is_document: Callable[[], bool] = lambda: False) -> Iterator[bytes]:
    """Chunks of whole lines (each ending with a newline) of about CHUNK_BYTES; the last line may lack one.

    `is_document()` says, once the whole text is read, whether the file is one JSON document (sniffed
    from the first chunk): then a last line without newline is its end, not a torn line."""
    size_limit = CHUNK_BYTES
    if data.startswith(_inflate.GZIP_MAGIC):
        pieces: Iterable[bytes] = inflated(data, log)
    else:
        pieces = (data[i : i + size_limit] for i in range(0, len(data), size_limit))
    pending: list[bytes] = []
    size = 0
    for piece in pieces:
        pending.append(piece)
        size += len(piece)
        if size >= size_limit:
            buf = b"".join(pending)
            cut = buf.rfind(b"\n")
            if cut < 0:
                pending, size = [buf], len(buf)
                continue
            yield buf[: cut + 1]
            rest = buf[cut + 1 :]
            pending, size = ([rest], len(rest)) if rest else ([], 0)
    if size:
        buf = b"".join(pending)
        cut = buf.rfind(b"\n")
        if cut >= 0:
            yield buf[: cut + 1]
        yield from last_piece(buf[cut + 1 :], cut, log, is_document())


def last_piece(tail: bytes, cut: int, log: FileLog, document: bool = False) -> Iterator[bytes]:
    """The bytes after a file's last newline: a whole record, a torn line (counted), or a one-line file.

    `cut` is where the last newline was (-1: the file has none).
    """
    if not tail.strip():
        return
    stripped = tail.strip().rstrip(b",")
    if document or stripped in (b"]", b"[") or json_object(stripped) is not None:
        yield tail + b"\n"
    elif log.truncated_gzip or cut >= 0:
        log.dropped_lines += 1
        log.warn("last line is torn (the writer was cut short); skipped 1 line")
    else:
        yield tail  # a one-line file: let the sniffer judge it


def json_object(b: bytes) -> dict | None:
    try:
        v = orjson.loads(b)
    except orjson.JSONDecodeError:
        return None
    return v if isinstance(v, dict) else None


def sniff(first: bytes, name: str) -> str:
    """LINES (JSON lines, optionally after a `[` line) or DOCUMENT (one JSON value), from the first text."""
    text = first.lstrip()
    if not text:
        raise TraceFormatError(f"{name}: not a trace: the file is blank")
    head = text[:1]
    line = text.split(b"\n", 1)[0].strip()
    if head == b"[":
        if line == b"[":
            # DFTracer's layout puts one whole object on each following line; a pretty-printed
            # JSON array does not
            rest = [ln.strip() for ln in text.split(b"\n", 6)[1:6] if ln.strip()]
            if not rest or json_object(rest[0].rstrip(b",")) is not None:
                return LINES
        return DOCUMENT
    if head == b"{":
        obj = json_object(line.rstrip(b","))
        if obj is not None:
            single = not text.strip().split(b"\n", 1)[1:]
            if "traceEvents" in obj or (single and "ph" not in obj and "name" not in obj):
                return DOCUMENT
            return LINES
        return DOCUMENT
    raise TraceFormatError(
        f"{name}: not a trace: expected DFTracer JSON lines (.pfw/.pfw.gz) or Chrome-trace JSON "
        f"(a traceEvents object or an array of events), but it starts with {_snippet(text)}"
    )


def _snippet(b: bytes) -> str:
    return repr(b[:40].decode("utf-8", "replace").split("\n", 1)[0])


def document_events(text: bytes, name: str) -> list:
    """The events of a Chrome-trace JSON document (an object with `traceEvents`, or an array)."""
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        # Chrome-trace arrays may omit the closing bracket or end with a comma.
        fixed = text.rstrip().rstrip(b",")
        try:
            doc = orjson.loads(fixed + b"]") if fixed.lstrip().startswith(b"[") else None
        except orjson.JSONDecodeError:
            doc = None
        if doc is None:
            raise TraceFormatError(
                f"{name}: not a trace: expected Chrome-trace JSON (a traceEvents object or an array "
                f"of events) but the JSON is invalid or cut short"
            ) from None
    if isinstance(doc, dict):
        events = doc.get("traceEvents")
        if not isinstance(events, list):
            raise TraceFormatError(
                f"{name}: not a trace: a JSON object without a traceEvents list (keys: {', '.join(list(doc)[:5])})"
            )
    elif isinstance(doc, list):
        events = doc
    else:
        raise TraceFormatError(f"{name}: not a trace: expected a JSON object or array of events")
    if events and not any(isinstance(e, dict) and "ph" in e for e in events[:100]):
        raise TraceFormatError(f"{name}: not a trace: its JSON array holds no events with a 'ph' field")
    return events
