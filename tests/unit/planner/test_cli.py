"""`floodway plan`: the text table, --json, a measured profile, and clear errors for bad input."""

import json
import subprocess
import sys

import pytest
from floodway.operator.cli import app
from typer.testing import CliRunner

runner = CliRunner()


def plan(*args: str) -> dict:
    result = runner.invoke(app, ["plan", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_json_plan_for_llama2_7b_on_a100(llama2_7b):
    p = plan("--model", llama2_7b, "--gpu", "a100-40gb", "--dtype", "float16", "--max-num-seqs", "16",
             "--rate", "2", "--prompt-tokens", "1000", "--output-tokens", "200")
    assert p["model"]["params"] == 6_738_415_616
    assert p["weights"]["bytes"] == 13_476_831_232
    assert p["weights"]["by_precision"]["int4"] == 3_369_207_808
    assert p["kv"]["bytes_per_token"] == 524_288
    assert p["kv"]["bytes_per_sequence_at_max_model_len"] == 2_147_483_648
    assert p["kv"]["bytes_per_sequence_at_expected"] == 1200 * 524_288  # 1,200 tokens = 75 whole blocks
    assert p["pool"]["kv_pool_bytes"] == 23_030_390_784  # 36 GiB - weights - 2 GiB (5% of 40 GiB)
    assert p["pool"]["max_seqs_at_max_model_len"] == 10
    assert p["pool"]["max_seqs_at_expected"] == 36  # 23,030,390,784 // 629,145,600
    assert p["fit"]["level"] == "warning"
    assert p["decode_ceiling_batch1_tokens_per_s"] == pytest.approx(1.555e12 / 13_476_831_232)
    t = p["throughput"]
    assert t["source"] == "bounds" and t["batch"] == 16 and t["limited_by"] == "maxNumSeqs"
    assert t["replicas"] == 1 and t["gpus_total"] == 1
    assert any("datasheet bounds" in n for n in p["notes"])


def test_profile_drives_replicas_and_cost(tmp_path):
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"model": "floodway/tiny-llama", "prefill_tokens_per_s": 10000,
                                   "decode_step_s": {"1": 0.011, "8": 0.018}, "kv_capacity_tokens": 100000,
                                   "max_num_seqs": 8}))
    p = plan("--model", "floodway/tiny-llama", "--profile", str(profile), "--rate", "10", "--prompt-tokens", "1000",
             "--output-tokens", "100", "--gpu-price-per-hour", "2", "--api-price-in", "1", "--api-price-out", "3")
    t = p["throughput"]
    # as in test_throughput: 8 sequences, 0.325 s of replica time per request -> 3.08 requests/s -> 4 replicas
    assert t["source"] == "profile" and t["batch"] == 8 and t["replicas"] == 4
    assert t["requests_per_s"] == pytest.approx(1 / 0.325)
    assert p["gpu"] is None and p["fit"] is None  # no GPU given: memory per sequence only
    assert p["cost"]["api_cost_per_request"] == pytest.approx(0.0013)
    assert p["cost"]["self_per_million_tokens_at_rate"] == pytest.approx(4 * 2 / 3600 / (10 * 1100) * 1e6)
    assert "throughput from the measured profile" in p["notes"]


def test_profile_of_another_model_is_noted(tmp_path, llama2_7b):
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"model": "other", "prefill_tokens_per_s": 1000, "decode_step_s": {"1": 0.05},
                                   "kv_capacity_tokens": 4096, "max_num_seqs": 4}))
    p = plan("--model", llama2_7b, "--profile", str(profile), "--prompt-tokens", "100", "--output-tokens", "100")
    assert any("measured on model 'other'" in n for n in p["notes"])
    assert any("plus 0 s per context token" in n for n in p["notes"])  # as `floodway simulate` reads it
    assert p["throughput"]["batch"] == 4


def test_text_table(llama2_7b):
    result = runner.invoke(app, ["plan", "--model", llama2_7b, "--gpu", "h100-80gb", "--rate", "20",
                                 "--slo-tpot-ms", "40", "--gpu-price-per-hour", "3", "--api-price-in", "0.5",
                                 "--api-price-out", "1.5", "--params", "7e9"])
    assert result.exit_code == 0, result.output
    out = result.output
    # 72 GiB budget - 14 GB - 4 GiB (5%) leaves 54.96 GiB: 27 sequences of 2 GiB; 3.35 TB/s / 14 GB = 239.3 tok/s
    for text in ("Parameters      7,000,000,000 (given with --params)", "bfloat16: 13.04 GiB (14.00 GB)",
                 "524,288 bytes/token", "Fit             WARNING", "lower maxNumSeqs to 27",
                 "Decode ceiling  239.3 tokens/s at batch 1", "Replicas        2 for 20 requests/s (2 GPUs)",
                 "break-even"):
        assert text in out, out


@pytest.mark.parametrize("args,message", [
    (["--model", "floodway/tiny-llama", "--gpu", "tpu-v5"], "unknown GPU 'tpu-v5'"),
    (["--model", "/nonexistent/model"], "no config.json found"),
    (["--model", "floodway/tiny-llama", "--gpu", "l4", "--gpu-memory-utilization", "0"], "gpu_memory_utilization"),
    (["--model", "floodway/tiny-llama", "--prompt-tokens", "0"], "--prompt-tokens"),
    (["--model", "floodway/tiny-llama", "--profile", "/nonexistent.json"], "cannot read"),
    (["--model", "floodway/tiny-llama", "--prompt-tokens", "2000"], "exceeds max_model_len 2048"),
])
def test_bad_input_exits_2_with_a_message(args, message):
    result = runner.invoke(app, ["plan", *args])
    assert result.exit_code == 2 and message in result.output, result.output


def test_real_process_and_no_torch(floodway_cmd, llama2_7b):
    proc = subprocess.run([*floodway_cmd, "plan", "--model", llama2_7b, "--gpu", "l4", "--json"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["fit"]["level"] == "warning"
    code = ("import sys; from typer.testing import CliRunner; from floodway.operator.cli import app; "
            f"r = CliRunner().invoke(app, ['plan', '--model', {llama2_7b!r}, '--gpu', 'l4']); "
            "assert r.exit_code == 0, r.output; print([m for m in ('torch', 'transformers') if m in sys.modules])")
    check = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=60)
    assert check.stdout.strip() == "[]", check.stdout + check.stderr


def test_cpu_profile_plans_float32_and_counts_no_gpus(tmp_path):
    profile = tmp_path / "cpu.json"
    profile.write_text(json.dumps({"model": "floodway/tiny-llama", "prefill_tokens_per_s": 300,
                                   "decode_step_s": {"1": 0.27, "64": 0.35}, "decode_context_tokens": 256,
                                   "kv_capacity_tokens": 65536, "max_num_seqs": 64, "device": "cpu"}))
    p = plan("--model", "floodway/tiny-llama", "--profile", str(profile), "--rate", "2", "--prompt-tokens", "200",
             "--output-tokens", "100")
    assert p["weights"]["precision"] == "float32" and p["kv"]["bytes_per_token"] == 4096  # 2 x 4 x 4 x 32 x 4
    assert p["throughput"]["replicas"] is not None and p["throughput"]["gpus_total"] is None
    assert any("measured at 256 context tokens; this workload averages 250" in n for n in p["notes"])


def test_the_table_s_gpu_price_gives_the_break_even_rate_unless_overridden(llama2_7b):
    args = ("--model", llama2_7b, "--gpu", "h100-80gb", "--prompt-tokens", "1000", "--output-tokens", "200",
            "--api-price-in", "0.5", "--api-price-out", "1.5")
    c = plan(*args)["cost"]
    # h100-80gb's indicative $3.00/hour; the API bills 1000 x 0.5 / 1e6 + 200 x 1.5 / 1e6 = $0.0008 a request:
    # one replica costs what the API does at 3 / 3600 / 0.0008 = 1.04 requests/s.
    assert c["replica_price_per_hour"] == 3.0 and c["api_cost_per_request"] == pytest.approx(0.0008)
    assert c["break_even_requests_per_s"] == pytest.approx(3 / 3600 / 0.0008)
    assert plan(*args, "--gpu-price-per-hour", "1.5")["cost"]["break_even_requests_per_s"] == \
        pytest.approx(1.5 / 3600 / 0.0008)
    assert plan("--model", llama2_7b, "--gpu", "l4", "--api-price-in", "0.5")["cost"] is None  # no table price
