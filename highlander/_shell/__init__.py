"""Drives the core over sockets through the Waiter: newcomer, incumbent, client, control."""
