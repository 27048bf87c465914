"""What every layer may use and that imports nothing of ours."""
