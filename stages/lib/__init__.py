"""The stages' library layer: code that stages share and that is no stage itself.

Stages (the DAG nodes, one module each in stages/) import from here, from schemas/ (file formats: shard,
ledger and packed writers and readers) and from pipeline/ (the runner's contracts), never from another stage.
tests/test_layers.py holds that rule.
"""
