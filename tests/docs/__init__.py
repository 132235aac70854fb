"""What the docs and examples say, checked: commands, claims, snippets, examples."""
