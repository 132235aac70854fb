"""Facts about this machine: identity, rendezvous, lock, record, listener, settings, logs."""
