"""The benchmarks (``make bench``): Highlander against itself and the peer lock libraries.

Run them as ``python -m scripts.bench`` from the repository root; ``main`` has
the command line, docs/performance.md what each benchmark measures.
"""
