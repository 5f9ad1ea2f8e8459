"""The kopf operator: thin handlers around pure rendering, scaling and status functions."""
