"""Helix workers: the producers of chunks (agent runtime, executors, tasks)."""
