"""The bundled training harness: a small GPT trained on a cpp-data export through megatron-core."""
