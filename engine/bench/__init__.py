"""`floodway bench engine`: our engine side by side with transformers baselines on the same workload."""
