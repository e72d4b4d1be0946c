"""gvr-integration."""
