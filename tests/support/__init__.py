"""Helpers shared by the tests and by the chaos and bench scripts.

Fixtures stay in tests/conftest.py; tests/README.md says why helpers are imported by full name.
"""
