"""The served chat benchmark's parts: the BF16 GGUF rewrite, llama-server's command line, stream parsing, the
latency quantiles and the side-by-side table."""

import json
import os
import threading
import time

import numpy as np
import pytest
from floodway.engine.bench import chat_load, llamacpp, served_overhead, serving, speculative, vllm
from floodway.engine.bench.chat_load import LoadResult
from floodway.engine.config import DEFAULT_CPU_KV_BYTES


def test_bf16_gguf_dequantizes_every_matrix_and_keeps_metadata(tmp_path):
    import gguf

    rng = np.random.default_rng(0)
    matrix, norm = rng.standard_normal((4, 64)).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    src = tmp_path / "q8.gguf"
    w = gguf.GGUFWriter(src, "llama")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_context_length(512)
    w.add_token_list(["<a>", "<b>"])
    w.add_chat_template("{{ messages }}")
    w.add_tensor("blk.0.attn_q.weight", gguf.quants.quantize(matrix, gguf.GGMLQuantizationType.Q8_0),
                 raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("blk.0.attn_norm.weight", norm)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    llamacpp.bf16_gguf(src, tmp_path / "bf16.gguf")
    out = gguf.GGUFReader(tmp_path / "bf16.gguf")
    tensors = {t.name: t for t in out.tensors}
    q = tensors["blk.0.attn_q.weight"]
    assert q.tensor_type == gguf.GGMLQuantizationType.BF16
    expected = gguf.quants.dequantize(gguf.GGUFReader(src).tensors[0].data, gguf.GGMLQuantizationType.Q8_0)
    np.testing.assert_allclose(gguf.quants.dequantize(q.data, q.tensor_type), expected, rtol=2**-8)
    assert tensors["blk.0.attn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    np.testing.assert_array_equal(tensors["blk.0.attn_norm.weight"].data, norm)
    fields = out.fields
    assert fields["general.architecture"].contents() == "llama"
    assert fields["general.file_type"].contents() == gguf.LlamaFileType.MOSTLY_BF16
    assert fields["llama.context_length"].contents() == 512
    assert fields["tokenizer.ggml.tokens"].contents() == ["<a>", "<b>"]
    assert fields["tokenizer.chat_template"].contents() == "{{ messages }}"


def test_llama_server_gets_the_operators_flags_and_one_thread():
    argv = llamacpp.server_argv("/bin/llama-server", "/m.gguf", "m", 8123, 32, 512, 1, 2048)
    assert argv[0] == "/bin/llama-server"
    flags = dict(zip(argv[1::2], argv[2::2], strict=False))
    assert flags["--model"] == "/m.gguf" and flags["--alias"] == "m" and flags["--port"] == "8123"
    assert flags["--parallel"] == "32" and flags["--ctx-size"] == str(32 * 512)  # each slot one full context
    assert argv[-4:] == ["--threads", "1", "--threads-batch", "1"]
    lookup = llamacpp.server_argv("/bin/llama-server", "/m.gguf", "m", 8123, 32, 512, 1, 2048,
                                  json.loads(speculative.NGRAM))
    assert lookup[lookup.index("--spec-type") + 1] == "ngram-simple"
    assert lookup[lookup.index("--spec-ngram-simple-size-m") + 1] == "4"


def test_our_baselines_are_the_variants_and_any_of_them_with_speculation():
    assert serving.variant_flags("floodway-spec", "{}") == ["--speculative-config", "{}"]
    assert serving.variant_flags("floodway-bf16-spec", "{}") == ["--dtype", "bfloat16", "--quantization", "none",
                                                                "--speculative-config", "{}"]
    assert serving.variant_flags("floodway-bf16", "{}") == ["--dtype", "bfloat16", "--quantization", "none"]
    assert [serving.ours(n) for n in ("floodway", "floodway-spec", "floodway-int4-spec", "floodway-x-spec",
                                      "llamacpp", "llamacpp-lookup")] == [False, True, True, False, False, False]


def test_grounded_requests_quote_a_text_the_answer_can_copy():
    for i in range(8):
        text = serving.PROMPTS["grounded"][0](i)[0]["content"]
        assert any(t in text for t in speculative.TEXT + speculative.CODE)
    # The answer ends with its copy: what a model writes past its EOS is free text, not the grounded workload.
    assert serving.PROMPTS["grounded"][1] is False and serving.PROMPTS["chat"][1] is True


def test_stream_lines_and_token_counts():
    assert chat_load.parse_sse(b'data: {"a": 1}\n') == {"a": 1}
    assert chat_load.parse_sse(b"data: [DONE]\n") is None
    assert chat_load.parse_sse(b"\n") is None
    assert chat_load.chunk_tokens({"choices": [{"delta": {"content": "hi"}}]}) == (True, None)
    assert chat_load.chunk_tokens({"choices": [{"delta": {"role": "assistant", "content": ""}}]}) == (False, None)
    assert chat_load.chunk_tokens({"choices": [], "usage": {"completion_tokens": 64}}) == (False, 64)


def test_requests_differ_from_their_first_token_of_text():
    a, b = chat_load.chat_messages(0), chat_load.chat_messages(len(chat_load.QUESTIONS))
    assert a[0]["content"].split(".", 1)[1] == b[0]["content"].split(".", 1)[1] and a != b


def test_ttft_quantiles_and_table():
    ours = LoadResult(tokens=640, seconds=10.0, ttfts=[0.1, 0.2, 0.3, 0.4, 1.0], cpu_seconds=8.0,
                      thread_cpu_seconds=(7.68, 0.32))
    base = LoadResult(tokens=640, seconds=8.0, ttfts=[0.2, 0.4, 0.6, 0.8, 2.0], short=1)
    assert ours.ttft_ms(0.5) == pytest.approx(300) and ours.ttft_ms(0.99) == pytest.approx(1000)
    assert LoadResult().ttft_ms(0.5) != LoadResult().ttft_ms(0.5)  # NaN without samples
    table = serving.render("m", "bfloat16", 1, 64, [(1, "floodway engine", ours), (1, "llama-server bf16", base)])
    rows = [line for line in table.splitlines() if line.startswith("| 1 |")]
    assert rows[0].startswith("| 1 | floodway engine | 64.0 | 1.00x | 300 | 1.00x | 1000 | 80.0 | 12.0 + 0.5 | 5 |")
    assert rows[1].startswith("| 1 | llama-server bf16 | 80.0 | 0.80x | 600 | 0.50x | 2000 | - | - | 5 (1 short) |")


def test_busiest_thread_and_the_rest():
    before, after = {"1": 10.0, "2": 1.0}, {"1": 15.0, "2": 1.5, "3": 0.25}  # thread 3 started in between
    assert serving.busiest_and_others(before, after) == (5.0, 0.75)
    assert serving.busiest_and_others({}, {}) is None


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="per-thread CPU is read from Linux's /proc")
def test_thread_cpu_of_a_real_process_counts_a_busy_thread():
    spun, done = threading.Event(), threading.Event()

    def spin():
        deadline = time.thread_time() + 0.2
        while time.thread_time() < deadline:
            pass
        spun.set()
        done.wait(10)  # alive while read: an ended thread leaves /proc

    before = serving.thread_cpu_seconds(os.getpid())
    worker = threading.Thread(target=spin)
    worker.start()
    try:
        assert spun.wait(10)
        busiest, _ = serving.busiest_and_others(before, serving.thread_cpu_seconds(os.getpid()))
    finally:
        done.set()
        worker.join()
    assert busiest >= 0.19


def test_served_overhead_table_gives_each_round_and_the_medians():
    table = served_overhead.render([(40.0, 41.0, 0.5), (50.0, 50.0, 1.0), (44.0, 43.0, 0.4)], 2, 64)
    rows = [line for line in table.splitlines() if line.startswith("| ") and line[2].isalnum()]
    assert rows[1] == "| 0 | 40.0 | 41.0 | 0.50 | 1.038x |"
    assert rows[-1] == "| median | 44.0 | 43.0 | 0.50 | 0.989x |"  # each column's own median


def test_vllm_gets_the_operators_flags_eager_and_a_cpu_block_size(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    spec = vllm.spec(str(tmp_path), "m", "auto", 32, 512, 2048)
    argv = vllm.server_argv("/venv/bin/python", spec, 8123)
    assert argv[:4] == ["/venv/bin/python", "-P", "-m", "vllm.entrypoints.openai.api_server"]
    flags = dict(zip(argv[4::2], argv[5::2], strict=False))
    assert flags["--model"] == str(tmp_path) and flags["--served-model-name"] == "m" and flags["--port"] == "8123"
    assert flags["--dtype"] == "float32"  # auto: what our engine takes on CPU, not vLLM's own choice
    assert flags["--max-num-seqs"] == "32" and flags["--block-size"] == "32"  # vLLM's CPU attention: multiples of 32
    kv = argv[argv.index("--kv-cache-memory-bytes") + 1]
    assert kv == str(DEFAULT_CPU_KV_BYTES)  # not a share of the host's memory
    assert "--shutdown-timeout" in argv and argv[-1] == "--enforce-eager"
    assert vllm.server_env(1) == {"OMP_NUM_THREADS": "1"}
    # pinned (--cpus): its compute threads bind to those CPUs, not to a NUMA node's
    assert vllm.server_env(1, {3, 1}) == {"OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "1,3"}


def test_cpu_lists_read_as_taskset_writes_them():
    assert serving.cpu_list("1") == {1} and serving.cpu_list("0,2") == {0, 2} and serving.cpu_list("2-4") == {2, 3, 4}
    for bad in ("", "a", "1,,2", "-1"):
        with pytest.raises(ValueError):
            serving.cpu_list(bad)


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="process trees are read from Linux's /proc")
def test_process_tree_and_its_peak_memory_count_a_child():
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import sys; b = bytearray(64 * 2**20); sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        tree = serving.process_tree(os.getpid())
        alone = serving.peak_rss_bytes(child.pid)
        deadline = time.monotonic() + 10
        while alone < 64 * 2**20 and time.monotonic() < deadline:  # until the child has touched its buffer
            time.sleep(0.05)
            alone = serving.peak_rss_bytes(child.pid)
        assert child.pid in tree and tree[0] == os.getpid()
        assert alone >= 64 * 2**20
    finally:
        child.communicate(b"")


def test_inter_token_latency_and_start_up_in_the_table():
    r = LoadResult(tokens=64, seconds=1.0, ttfts=[0.1], itls=[0.01, 0.02, 0.03, 0.5])
    assert r.itl_ms(0.5) == pytest.approx(30) and r.itl_ms(0.99) == pytest.approx(500)
    table = serving.render("m", "float32", 1, 64, [(8, "floodway engine", r)], {"floodway engine": 7.3, "vllm": 89.0},
                           {"floodway engine": 2 * 2**30, "vllm": 5 * 2**30})
    assert table.splitlines()[4].endswith("| 30.0 | 500.0 |")
    assert "| floodway engine | 7.3 | 2048 |" in table and "| vllm | 89.0 | 5120 |" in table


def test_the_offline_vllm_baseline_reports_a_python_without_vllm_as_its_error():
    import sys

    from floodway.engine.bench.workloads import Workload

    wl = Workload("t", [[5, 6, 7]], [4], "one request")
    r = vllm.run_offline(sys.executable, wl, "unused", "float32", 64, 4, 64, 2**20)
    assert r.error and "vllm" in r.error and r.tokens_per_s == 0.0
