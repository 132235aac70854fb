"""The public handle as a Python user meets it, in-process and with real processes."""
