"""The chaos harness (``make chaos``): random kills, stops and damage, then a judge of the evidence.

Run it as ``python -m scripts.chaos --events 500 --seed 1`` from the repository root;
``main`` has the command line, docs/reliability.md what each module does.
"""
