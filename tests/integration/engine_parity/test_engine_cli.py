"""`floodway generate` and `floodway bench engine` as real processes, on the built-in tiny model."""

import json
import subprocess


def run(cmd, timeout=300):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def test_generate_prints_text_and_refuses_bad_params(floodway_cmd, tiny_model_path):
    ok = run(floodway_cmd + ["generate", "Hello", "--max-tokens", "4", "--model", tiny_model_path])
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip()
    bad = run(floodway_cmd + ["generate", "Hello", "--top-p", "0", "--model", tiny_model_path])
    assert bad.returncode != 0 and "top_p" in bad.stderr


def test_bench_engine_side_by_side_with_profile(floodway_cmd, tiny_model_path, tmp_path):
    prof = tmp_path / "profile.json"
    res = run(floodway_cmd + ["bench", "engine", "--model", tiny_model_path, "--workload", "a", "--num-requests",
                              "3", "--max-model-len", "512", "--baselines", "static,sequential", "--seq-requests",
                              "1", "--threads", "1", "--profile-out", str(prof)], timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    for name in ("floodway engine", "transformers static batch", "transformers sequential"):
        assert f"| {name} |" in res.stdout
    assert "peak blocks in use" in res.stdout and "prefix-cache hit rate" in res.stdout
    data = json.loads(prof.read_text())
    assert data["prefill_tokens_per_s"] > 0 and data["kv_capacity_tokens"] > 0
    assert set(data["decode_step_s"]) == {"1", "8", "32", "64"} and data["max_num_seqs"] == 64


def test_bench_engine_bf16_against_continuous_batching(floodway_cmd, tiny_model_path):
    res = run(floodway_cmd + ["bench", "engine", "--model", tiny_model_path, "--workload", "c", "--num-requests",
                              "6", "--baselines", "continuous", "--threads", "1", "--dtype", "bfloat16"], timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "torch.bfloat16" in res.stdout and "| transformers continuous batching |" in res.stdout


def test_bench_engine_refuses_unknown_baseline_and_dtype(floodway_cmd, tiny_model_path):
    res = run(floodway_cmd + ["bench", "engine", "--model", tiny_model_path, "--baselines", "magic"])
    assert res.returncode != 0 and "magic" in res.stderr
    res = run(floodway_cmd + ["bench", "engine", "--model", tiny_model_path, "--dtype", "float8"])
    assert res.returncode != 0 and "dtype must be one of" in res.stderr
