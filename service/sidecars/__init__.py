"""The side servers the service starts: embeddings, metrics, the local LLM."""
