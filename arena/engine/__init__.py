"""Training engine: counter RNG, batched (DP-)SGD trainer, Newton solver and privacy accounting."""
