"""The project's scripts, run from the repository root as modules: ``python -m scripts.chaos``.

Each folder is a package (``chaos``, ``bench``, ``demo``) whose modules import
each other, and the test suite's helpers, by their full names from the
repository root; no script edits ``sys.path``.  ``fuzz.py`` stands alone.
"""
