"""What the benchmarks share: `results.publish` (print a benchmark's table, write its JSON under
benchmarks/results/) and `markdown` (docs/performance.md's tables from those JSON files).

The benchmarks import it as `common` (tests/support is the tests' helpers) because benchmarks/ is the first entry of sys.path when one of them,
or run.py, runs as a script."""
