"""Pairing torch's compile-timer begin/end events into spans (trace/spans.py), which the compile-phase
trace events (capture) and the compile times per phase (explain) both build on."""

from dynascope.trace.spans import OpenSpans


def test_end_closes_the_innermost_open_span_of_its_name():
    spans = OpenSpans()
    spans.begin("0/0", "entire_frame_compile", 1.0, {"compile_id": "0/0"})
    spans.begin("0/0", "backend_compile", 2.0)
    spans.begin("1/0", "backend_compile", 2.5)  # another compile's span is kept apart
    inner = spans.end("0/0", "backend_compile", 5.0)
    assert (inner.name, inner.start, inner.end, inner.outermost) == ("backend_compile", 2.0, 5.0, True)
    outer = spans.end("0/0", "entire_frame_compile", 9.0)
    assert (outer.start, outer.args) == (1.0, {"compile_id": "0/0"})
    assert spans.end("0/0", "entire_frame_compile", 10.0) is None  # nothing open any more
    assert spans.end("1/0", "backend_compile", 3.0).start == 2.5


def test_nested_spans_of_one_name_and_spans_never_closed():
    spans = OpenSpans()
    spans.begin("t", "compile_fx_inner", 1.0)
    spans.begin("t", "compile_fx_inner", 2.0)
    assert spans.end("t", "compile_fx_inner", 3.0).outermost is False  # a nested call of the same phase
    assert spans.end("t", "compile_fx_inner", 4.0).outermost is True
    spans.begin("t", "outer", 5.0)
    spans.begin("t", "never_closed", 6.0)
    assert spans.end("t", "outer", 7.0).start == 5.0
    assert spans.end("t", "never_closed", 8.0) is None  # dropped when the span around it closed
    assert spans.end("t", "no_such_span", 9.0) is None
