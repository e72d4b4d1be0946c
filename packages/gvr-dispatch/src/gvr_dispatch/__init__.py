"""gvr-dispatch."""
