"""One task's logic with no sockets and no clock: the executor and its rooms (spout side,
bolt side, runs, acks, taps, statistics), the collector's wiring and the outbound
batches. Driven through TaskExecutor (driven.py) by the instance process and by
runtime.testing."""
