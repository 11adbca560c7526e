"""Evaluation: extraction scored against a labelled set (:mod:`workbench.eval.extraction`) and
retrieval scored on a question set (:mod:`workbench.eval.retrieval`). It may import any part
of the core; nothing in the core imports it."""
