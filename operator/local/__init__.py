"""`floodway up`: the InferenceService spec on one machine, with local processes and the same control code."""
