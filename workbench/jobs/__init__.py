"""Whole-graph jobs: work over a store at once, beside the episode path (``ingest``).

* :mod:`~workbench.jobs.conversations`: conversation exports (ChatGPT, Claude, a generic
  JSON-lines form) read into conversations and cut into sessions (pure).
* :mod:`~workbench.jobs.history`: a history import, those sessions stored as ``message``
  episodes in bulk, their passages searchable by their words when it returns.
"""
