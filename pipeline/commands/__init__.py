"""One module per CLI verb (pipeline/cli.py dispatches)."""
