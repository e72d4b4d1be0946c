"""gvr-reference."""
