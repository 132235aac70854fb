"""Mutation testing of the pure core (``make mutate``, issue #19).

Run it as ``python -m scripts.mutate`` from the repository root; ``main`` has
the command line, ``ops`` the mutations, ``run`` the runner, ``equivalent``
the mutants that change no behaviour (each with its reason).
"""
