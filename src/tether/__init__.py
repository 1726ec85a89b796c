"""tether: an agent harness with owned lifecycles and durable sessions."""

__version__ = "0.1.0"
