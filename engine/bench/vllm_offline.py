"""vLLM's offline engine (`vllm.LLM.generate`) on a benchmark workload, run by the python of vLLM's own virtualenv
(it imports nothing of ours): reads the workload and engine settings as JSON on stdin, prints one JSON line with the
output tokens, wall and CPU seconds of the timed generate. The engine core runs in this process
(VLLM_ENABLE_V1_MULTIPROCESSING=0, set by the caller), so process CPU time covers it as it does ours.
"""

import json
import sys
import time


def main() -> None:
    job = json.load(sys.stdin)
    from vllm import LLM, SamplingParams

    llm = LLM(model=job["model"], dtype=job["dtype"], max_model_len=job["max_model_len"],
              max_num_seqs=job["max_num_seqs"], max_num_batched_tokens=job["max_num_batched_tokens"],
              block_size=job["block_size"], kv_cache_memory_bytes=job["kv_cache_bytes"], enforce_eager=True,
              seed=0)
    warm = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)
    llm.generate([{"prompt_token_ids": [5, 6, 7, 8]}], warm, use_tqdm=False)
    prompts = [{"prompt_token_ids": p} for p in job["prompts"]]
    params = [SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True) for n in job["max_tokens"]]
    wall, cpu = time.perf_counter(), time.process_time()
    outs = llm.generate(prompts, params, use_tqdm=False)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    tokens = sum(len(c.token_ids) for o in outs for c in o.outputs)
    print(json.dumps({"tokens": tokens, "seconds": wall, "cpu_seconds": cpu}))


if __name__ == "__main__":
    main()
