"""`floodway bench engine --workload chat` as a real process: our engine's server started, loaded by the closed-loop
streamed chat client at two concurrencies beside our engine with --compile-decode, every request answered with
exactly the tokens asked for. (The
llama-server baselines run the same client against the binary e2e/llamacpp/build.sh builds; its flags are unit-tested
and the server itself runs in tests/integration/runtimes/test_llamacpp.py.)"""

import shutil
import subprocess

import pytest


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                    reason="the compiled variant needs a C++ compiler for torch.compile's CPU code")
def test_served_chat_bench_against_our_compiled_variant(floodway_cmd, tiny_model_path):
    res = subprocess.run(floodway_cmd + ["bench", "engine", "--model", tiny_model_path, "--workload", "chat",
                                         "--baselines", "floodway-compile-decode", "--concurrency", "1,3",
                                         "--num-requests", "3", "--max-tokens", "5", "--threads", "1"],
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.splitlines()
    header = [c.strip() for c in next(line for line in lines if line.startswith("| concurrency |")).split("|")]
    rows = [dict(zip(header, (c.strip() for c in line.split("|")), strict=True)) for line in lines
            if line.startswith(("| 1 |", "| 3 |"))]
    assert [r["system"] for r in rows] == ["floodway engine", "floodway-compile-decode"] * 2
    for r in rows:  # tok/s, 3 requests (none short)
        assert float(r["output tok/s"]) > 0 and r["requests"] == "3"
    assert [r["floodway x"] for r in rows[::2]] == ["1.00x"] * 2  # ours over itself


def test_llama_baselines_need_smollm2(floodway_cmd, tiny_model_path):
    res = subprocess.run(floodway_cmd + ["bench", "engine", "--model", tiny_model_path, "--workload", "chat",
                                         "--baselines", "llamacpp"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "smollm2" in res.stderr
