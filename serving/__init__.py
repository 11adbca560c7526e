"""What the memory service and the voice server share: guards, errors, request logs, API docs.

Neutral ground: it imports neither ``service`` nor ``voice``; both import it."""
