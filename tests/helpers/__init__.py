"""What every test may use: one skip helper, one quiet Trainer, one small model, the process launchers."""
