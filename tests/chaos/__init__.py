"""The chaos harness (scripts/chaos): its parts, and a bounded run."""
