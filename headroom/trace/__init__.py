"""Stage `trace`: request logs (synthetic or real serving logs) -> a time-ordered invocation trace.

requests.py reads and simulates request logs (continuous batching); invocations.py samples the
window, rounds shapes and writes the trace's columns and `shape_key`.
"""
