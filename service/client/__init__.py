"""The client of a live service: its record, finding it, and calling it from another process."""
