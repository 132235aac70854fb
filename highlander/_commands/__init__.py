"""The command line's commands: status, stop, doctor, run (and its process tree)."""
