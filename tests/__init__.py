"""The test suite, a package so its helpers import by full name (tests/README.md)."""
