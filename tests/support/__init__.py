"""Helpers the tests share across folders (importable as `support.*`: pyproject puts tests/ on
sys.path): tracecheck (the trace format's checks), trace_fixtures, frame_trace and step_trace
(synthetic traces), invariants (what every `dynascope run` result must hold), explain_helpers
(the toy functions the explain, decompiler and stepping tests compile), render_cdp (headless Chromium)."""
