"""Readers and summaries of trace files. Never imports torch: traces can be analysed anywhere."""
