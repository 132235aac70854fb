"""Real holders and newcomers: succession, attacks, guards, the watchdog, the rendezvous."""
