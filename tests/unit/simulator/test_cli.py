"""`floodway simulate` end to end in a subprocess, on a small synthetic trace."""

import subprocess

import pytest


def test_simulate_prints_the_table_and_writes_the_plot(floodway_cmd, tmp_path):
    png = tmp_path / "sim.png"
    proc = subprocess.run([*floodway_cmd, "simulate", "--trace", "steps:rates=2/10/3,step_s=120",
                           "--policy", "floodway", "--policy", "keda", "--overflow", "--static-peak", "2",
                           "--cold-start", "60", "--png", str(png)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "| floodway+overflow" in out and "| keda+overflow" in out and "static peak 2 replicas" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args, message", [
    (["--trace", "steps:rates=1", "--policy", "magic"], "unknown policy"),
    ([], "give --trace or --scenario"),
    (["--scenario", "nope"], "unknown scenario"),
    (["--trace", "/nonexistent/trace.csv"], "trace file not found"),
])
def test_bad_options_are_clear_errors(floodway_cmd, args, message):
    proc = subprocess.run([*floodway_cmd, "simulate", *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_azure_2x_replays_the_azure_trace_twice_as_fast():
    from floodway.operator.simulator.scenarios import SCENARIOS

    assert SCENARIOS["azure-2x"].trace == SCENARIOS["azure-4x"].trace == "azure-conv"
    assert (SCENARIOS["azure-2x"].compress, SCENARIOS["azure-4x"].compress) == (2.0, 4.0)
