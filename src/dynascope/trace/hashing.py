"""16-hex-digit string hashes, as DFTracer writes them for hosts, files, strings and ops."""

from __future__ import annotations

import hashlib


def hash16(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
