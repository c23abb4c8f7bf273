"""Debugging compiled programs: backend bisect, accuracy down to the op, standalone repros
(docs/debug.md). Built on capture/ (attribution) and explain/; never imported by them."""
