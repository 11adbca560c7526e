"""Ingestion, the episode path: an episode accepted (``accept``, ``intake``) with its passages
(``passages``, ``verbatim``, ``backlog``), the durable queue and its policies (``queue/``),
extraction (the LLM side), the write (the transaction side), the graph reads and recent
context extraction uses, and the re-embedding policy. Whole-graph work (import,
re-extraction, a model switch, a history import) is :mod:`workbench.jobs`'s."""
