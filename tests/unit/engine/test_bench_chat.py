"""The served chat benchmark's parts: the BF16 GGUF rewrite, llama-server's command line, stream parsing, the
latency quantiles and the side-by-side table."""

import os
import threading
import time

import numpy as np
import pytest
from floodway.engine.bench import chat_load, llamacpp, served_overhead, serving
from floodway.engine.bench.chat_load import LoadResult

pytestmark = pytest.mark.unit


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
