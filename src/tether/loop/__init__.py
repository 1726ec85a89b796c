"""The agent loop: the turn driver, the agent factory, and the plugin."""
