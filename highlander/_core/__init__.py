"""The sans-IO core: messages, codec, signing, deadlines, state machine, policy (pure)."""
