"""The reference pages of the docs site (docs/reference/), generated from the code so that they cannot drift:
the InferenceService fields from the CRD that operator/crdgen builds, the commands from the CLI, the metrics from
their definitions. `python -P -m floodway.operator.refdocs [--check]` writes or checks them."""
