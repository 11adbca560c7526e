"""Decay and lifecycle: the pure rules (:mod:`workbench.decay.rules`), the maintenance run and
its scheduler (:mod:`workbench.decay.maintenance`) and the LLM classification of importance
and stability (:mod:`workbench.decay.classification`).

This ``__init__`` imports nothing: the store's SQL twin of the rules imports
:mod:`workbench.decay.rules`, which must not pull the maintenance run (and so the store) in."""
