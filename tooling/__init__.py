"""Processes and set-up shared by the tests and the benchmarks; not part of the package."""
