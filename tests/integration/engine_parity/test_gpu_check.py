"""`e2e/gpu/check.sh --cpu`: the GPU check's whole path on tiny shapes, so it cannot rot where no GPU is. Run as a
user runs it (bash, the checkout's engine through the script's import shim) with the packages a GPU machine that
has only torch and transformers lacks made unimportable (so the GGUF row says it was not measured; test_gpu_check.py
in tests/unit/engine serves that row with gguf). Its self-test flag biases one of our prompts, as a wrong kernel
would: the check must then exit 1."""

import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]
# Installed here but not on the GPU machines (torch and transformers only): the check must never import them.
ABSENT = ("xgrammar", "gguf", "fastapi", "pydantic", "typer", "uvicorn", "prometheus_client", "httpx", "aiohttp",
          "kopf", "kubernetes")
BLOCKER = """import sys

class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {absent!r}:
            raise ModuleNotFoundError(f"{{name}} is not on a GPU machine", name=name)

sys.meta_path.insert(0, Absent())
"""


def run_check(tmp_path: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER.format(absent=set(ABSENT)))
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1"}
    return subprocess.run(["bash", str(ROOT / "e2e/gpu/check.sh"), "--cpu", *args], env=env, capture_output=True,
                          text=True, timeout=900)


def test_cpu_dry_run_prints_every_section(tmp_path):
    table = tmp_path / "table.md"
    r = run_check(tmp_path, "--out", str(table))
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert re.search(r"device copy bandwidth [\d,.]+ GB/s .* float32 matmul [\d.e+-]+ TFLOP/s", out)
    assert re.search(r"KV cache: \d+ blocks of 16 tokens", out)
    for b in (1, 4):
        assert re.search(rf"decode batch {b}: floodway [\d,.]+ tok/s", out)
        # transformers 5 has continuous batching: a figure, not a failure
        assert re.search(rf"decode batch {b}: transformers static [\d,.]+ tok/s, continuous [\d,.]+ tok/s", out)
    assert re.search(r"prefill 2 x 32 tokens: floodway [\d,.]+ tok/s", out)
    assert re.search(r"decode batch 1 with --enforce-eager: [\d,.]+ tok/s|no --enforce-eager", out)
    # float32 on the CPU: our greedy tokens equal transformers' float32 ones to the end (8 tokens) on every prompt
    rows = re.findall(r"^ +\d+ \| +(\d+) \| +(\d+) \| +(\d+) \|.*\| (ok|FAIL)$", out, re.M)
    assert rows == [("8", "8", "8", "ok")] * 3, out
    assert "parity: 3/3 prompts pass" in out
    assert out.rstrip().endswith("parity: every prompt ok\nfeatures: every section ran"), out[-3000:]
    # the feature rows (bfloat16 on the CPU): each format, speculation on both workloads, 16 adapters, at 1 and 4
    for c in (1, 4):
        for weights in ("bfloat16", "int8", "int4"):
            assert re.search(rf"^  {weights}, concurrency {c}: [\d,.]+ tok/s$", out, re.M), weights
        for workload in ("grounded", "chat"):
            assert re.search(rf"^  \| {workload} \| {c} \| [\d,.]+ \| [\d,.]+ \| [\d.]+x \|", out, re.M), workload
        for rows_of in ("base, engine without LoRA", "base, LoRA engine", "16 adapters uniformly"):
            assert re.search(rf"^  \| {c} \| {rows_of} \| [\d,.]+ \| [\d.]+x \| [\d.]+x \| [\d.]+-[\d.]+x \|$", out,
                             re.M), rows_of
    assert "GGUF Q4_1: not measured: the gguf package, which writes the file, is not installed" in out
    tables = out.split("## README table\n", 1)[1]
    assert "| tiny-llama (0.00B) | 3/3 pass" in tables and "| tiny-llama | 4 |" in tables
    for title in ("## Engine features on tiny-llama-g32", "### Quantized weights", "### Speculative decoding",
                  "### LoRA (16 adapters of rank 16)"):
        assert title in tables, title
    assert re.search(r"^\| int4 \| (aten\._weight_int4pack_mm_for_cpu|floodway avx512 int4 matmul, [\w ]+) \(int4, "
                     r"group 32\) \| [\d,.]+ \(\*\*[\d.]+x\*\* "
                     r"bfloat16\) \|", tables, re.M), tables
    assert tables.startswith(table.read_text())


def test_injected_mismatch_fails(tmp_path):
    r = run_check(tmp_path, "--inject-mismatch", "--features", "none")
    assert r.returncode == 1, r.stdout + r.stderr
    first = re.search(r"^ +\d+ \| +\d+ \| +\d+ \| +(\d+) \| +(\S+) \| +(\S+) \| (ok|FAIL)$", r.stdout, re.M)
    diverged, margin, tolerance, verdict = first.groups()
    assert verdict == "FAIL" and int(diverged) < 8 and float(margin) > float(tolerance)
    assert "PARITY FAILURE: tiny-llama" in r.stdout and r.stdout.rstrip().endswith("features: none run")


def test_unknown_model_is_refused(tmp_path):
    r = run_check(tmp_path, "--models", "llama-70b")
    assert r.returncode == 2 and "unknown model(s) ['llama-70b']" in r.stdout
    r = run_check(tmp_path, "--features", "llama-70b")
    assert r.returncode == 2 and "unknown model(s) ['llama-70b']" in r.stdout
