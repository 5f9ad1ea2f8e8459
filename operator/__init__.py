"""Floodway's control plane: spec, reconcile, autoscaler, gateway, local runner, planner, CLI.

Nothing under floodway.operator imports torch: the control-plane image has none.
"""
