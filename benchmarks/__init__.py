"""pytest-benchmark suites of portops; ``python -m benchmarks.report`` summarises a run."""
