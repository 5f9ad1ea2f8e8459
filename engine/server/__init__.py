"""The OpenAI-compatible engine server. Importing this package is torch-free (the gateway reuses protocol.py)."""
