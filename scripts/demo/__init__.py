"""The tour (``make demo``): the handshake in memory, then two real servers handing over.

Run it as ``python -m scripts.demo`` from the repository root.
"""
