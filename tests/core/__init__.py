"""The pure protocol core (highlander/_core): no process, socket or clock."""
