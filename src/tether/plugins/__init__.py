"""Consumer plugins: tools and other parts built on the services."""
