"""The highlander command, run and the MCP servers, against real processes."""
