"""The etcd floor (issue #15): talking to an etcd cluster where holders on several hosts meet.

Above the host floor and below the shell: it may use the protocol core and
this machine's services, and the shell's etcd backend uses it.  ``api`` and
``endpoints`` are pure (tests/core/test_purity.py checks them); ``client``
moves their bodies over HTTP.  Nothing here is imported unless a backend
says ``etcd://``; it needs nothing beyond Highlander's own dependencies
(``http`` and ``http11`` speak HTTP/1.1 over plain sockets and ``ssl``, and
the session runs on ``loop_thread``, the serving side's selector loop).
"""
