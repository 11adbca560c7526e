"""Embedders behind one small protocol (:class:`Embedder`): the local model in process
(:class:`LocalEmbedder`, on onnxruntime or torch), and :class:`CompatEmbedder`, a client of any
OpenAI-wire ``/embeddings`` server. :func:`build_embedder` picks the one the settings ask for.

Vectors are returned L2-normalised so that a dot product is the cosine similarity.
"""

from __future__ import annotations

from workbench.config import Settings
from workbench.embedding.base import Embedder, check_texts, normalise
from workbench.embedding.compat import CompatEmbedder
from workbench.embedding.local import LocalEmbedder, local_embedder
from workbench.errors import EmbedderError

__all__ = [
    "CompatEmbedder",
    "Embedder",
    "LocalEmbedder",
    "build_embedder",
    "check_texts",
    "local_embedder",
    "normalise",
]


def build_embedder(settings: Settings) -> Embedder:
    """The embedder the settings ask for (``compat`` when a base URL is set, else local)."""
    if settings.embedder_kind == "compat":
        if not settings.embedder_model or not settings.embedder_dimensions:
            raise EmbedderError(
                "the compat embedder needs SVC_KNOWLEDGE_EMBEDDER_MODEL and "
                "SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS"
            )
        key = settings.embedder_api_key
        return CompatEmbedder(
            settings.embedder_base_url or "",
            settings.embedder_model,
            settings.embedder_dimensions,
            api_key=key.get_secret_value() if key else None,
            send_input_type=settings.embedder_input_type,
        )
    return local_embedder(settings, settings.embedder_model or settings.local_embedder_model)
