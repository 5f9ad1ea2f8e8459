"""Floodway's inference engine: everything that runs inside an engine pod.

Importing this package is cheap and torch-free; torch loads only with the modules that need it.
"""
