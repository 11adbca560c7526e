"""Stand-ins for outside services that speak their real wire protocol, for notebooks,
benchmarks and tests: a chat-completions server on loopback (:mod:`.chat_server`) with
rule-based and recorded repliers (:mod:`.rule_llm`, :mod:`.replay_llm`), and a deterministic
bag-of-words embedder (:mod:`.embedder`). Nothing in the core imports them."""
