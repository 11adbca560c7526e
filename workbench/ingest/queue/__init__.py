"""The durable episode queue and its policies: its one loop (``episode_queue``,
``dispatch``), what it drives (``work``), its knobs (``config``), what happened to a
message (``outcomes``), retries (``retry``), setbacks that spend no attempt
(``setbacks``), messages of a process that died (``recovery``), writes batched
(``group_commit``) and the daily LLM budget of a group (``budget``)."""
