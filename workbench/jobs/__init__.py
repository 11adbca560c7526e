"""Whole-graph jobs: work over a store at once, beside the episode path (``ingest``).

* :mod:`~workbench.jobs.importer`: pre-extracted entities and facts (JSON lines or Parquet),
  and a backup folder restored.
* :mod:`~workbench.jobs.reextract`: a group's episodes re-extracted into a shadow graph
  (:mod:`~workbench.jobs.shadow`), compared, then promoted or discarded; its pure rules
  (the cost estimate, matching memories across generations) in
  :mod:`~workbench.jobs.generations`.
* :mod:`~workbench.jobs.switch_model`: every memory re-embedded with another model.
* :mod:`~workbench.jobs.conversations`: conversation exports (ChatGPT, Claude, a generic
  JSON-lines form) read into conversations and cut into sessions (pure).
* :mod:`~workbench.jobs.history`: a history import, those sessions stored as ``message``
  episodes in bulk, their passages searchable by their words when it returns.
"""
