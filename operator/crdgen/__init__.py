"""Generates the InferenceService CRD from the spec models."""
