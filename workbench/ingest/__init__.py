"""Ingestion: the durable episode queue and its retry policy, extraction (the LLM side) and the
write (the transaction side), the graph reads and recent context extraction uses, the
re-embedding policy, and the import of pre-extracted entities and facts."""
