"""Running datatrove steps: one module per engine, task logging apart."""
