"""`floodway bench engine` (our engine side by side with transformers baselines, or its server against
llama-server with --workload chat) and `floodway bench serve`. Heavy imports stay inside the commands."""

import typer
from floodway.engine.bench import serve_cli
from floodway.engine.bench.speculative import NGRAM


def register(bench_app: typer.Typer) -> None:
    """Adds `floodway bench engine` and `floodway bench serve`."""
    @bench_app.command("engine")
    def bench_engine(
        model: str = typer.Option("floodway/llama-150m", help="Model for all systems (built-in name, id, folder)."),
        workload: str = typer.Option("b", help="a: fixed lengths; b: Azure conversation trace; c: Mooncake prefixes; "
                                               "chat: served chat at each --concurrency against llama-server "
                                               "and vLLM; spec: without and with --speculative-config, on "
                                               "input-grounded requests and free chat at each --concurrency; "
                                               "lora: the base model against 1, 4 and 16 adapters mixed "
                                               "uniformly at each --concurrency, and adapter load time."),
        num_requests: int | None = typer.Option(None, help="Requests in the workload (default a 32, b 64, c 48)."),
        max_model_len: int = typer.Option(512, help="Engine max_model_len; trace lengths scale to it."),
        seq_requests: int = typer.Option(4, help="Requests timed for the sequential baseline (it is slow)."),
        baselines: str | None = typer.Option(None, help="Comma list of baselines to run (default: sequential,"
                                                        "static,continuous; for chat: llamacpp,llamacpp-q4_1; "
                                                        "also vllm, llamacpp-q8_0, llamacpp-q4_k_m, "
                                                        "floodway-compile-decode, ours with that flag, ours per "
                                                        "weight format: floodway-fp32, -bf16, -q4_1, -q8_0, "
                                                        "-q4_k_m, -int8, -int4, and with speculation: "
                                                        "floodway-spec, any of ours + -spec (floodway-bf16-spec), "
                                                        "llamacpp-lookup, llamacpp-q4_1-lookup)."),
        profile_out: str | None = typer.Option(None, help="Also write a JSON step-cost profile here."),
        traces: str | None = typer.Option(None, help="Traces folder (default: the vendored data/traces)."),
        threads: int = typer.Option(0, help="torch intra-op threads for every system (0: torch's default, all "
                                            "cores). transformers continuous batching runs in its own thread."),
        dtype: str = typer.Option("auto", help="Weights, activations and KV for every system: auto (bfloat16 on "
                                               "CUDA, float32 on CPU), float32, bfloat16 or float16."),
        tpot_slo_ms: float = typer.Option(0.0, help="Also measure TPOT of decoding requests while long prompts "
                                                    "arrive, without and with this prefill budget (0: skip)."),
        n: int = typer.Option(0, "--n", help="Also run the workload's first prompts as one request with n choices "
                                             "each against n separate requests each (0: skip)."),
        concurrency: str = typer.Option("1,8,32", help="chat, spec, lora: comma list of concurrent clients, one run "
                                                       "each."),
        max_tokens: int = typer.Option(64, help="chat, spec, lora: new tokens per request."),
        rounds: int = typer.Option(3, help="spec, lora: runs of each cell, the order of the cells reversed every "
                                           "other round; ratios are of the rounds' sums."),
        lora_rank: int = typer.Option(16, help="lora: the adapters' rank (and the engine's --max-lora-rank)."),
        speculative_config: str = typer.Option(NGRAM, help="spec: the speculating engine's --speculative-config "
                                                           "(chat: floodway-spec's and the -lookup baselines')."),
        prompts: str = typer.Option("chat", help="chat: the requests' messages: chat (short questions) or grounded "
                                                 "(rewrite or repeat a given text or code, the spec workload's)."),
        llama_server: str | None = typer.Option(None, help="chat: llama-server binary (default: the one "
                                                           "e2e/llamacpp/build.sh builds and caches)."),
        vllm_python: str | None = typer.Option(None, help="python of a vLLM CPU virtualenv for the vllm baseline, "
                                                          "served or offline (default: the one e2e/vllm/build.sh "
                                                          "builds and caches)."),
        temperature: float = typer.Option(0.0, help="chat: the requests' sampling temperature (0: greedy)."),
        cpus: str | None = typer.Option(None, help="chat: pin every server, each with all its processes, to these "
                                                   "CPUs (taskset's list: 1, or 2-3), the load client to the others: "
                                                   "one core per server, whatever processes it runs."),
    ) -> None:
        """Our engine vs transformers sequential generate, a static padded batch and transformers' continuous
        batching, side by side on one workload; prints tokens/s, ratios, KV usage and prefix-cache hits. With
        --workload chat: our engine's server against llama.cpp's llama-server on the same weights, over HTTP."""
        if workload == "spec":
            from floodway.engine.bench.speculative import run as run_spec

            run_spec(model, speculative_config, _counts(concurrency), threads, dtype, max_model_len, max_tokens,
                     num_requests, rounds)
            return
        if workload == "lora":
            from floodway.engine.bench.lora import run as run_lora

            run_lora(model, lora_rank, _counts(concurrency), threads, dtype, max_model_len, max_tokens, num_requests,
                     rounds)
            return
        if workload == "chat":
            from floodway.engine.bench.serving import run as run_served

            run_served(model, _names(baselines, "llamacpp,llamacpp-q4_1"), _counts(concurrency), threads, dtype,
                       max_model_len, max_tokens, num_requests, llama_server, vllm_python, prompts,
                       speculative_config, cpus, temperature)
            return
        from floodway.engine.bench.runner import run

        run(model, workload, num_requests, max_model_len, seq_requests,
            _names(baselines, "sequential,static,continuous"), profile_out, traces, threads, dtype, tpot_slo_ms, n,
            vllm_python)

    serve_cli.register(bench_app)


def _names(option: str | None, default: str) -> list[str]:
    return [b for b in (default if option is None else option).split(",") if b]


def _counts(option: str) -> list[int]:
    try:
        counts = [int(c) for c in option.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise typer.BadParameter(f"concurrency must be a comma list of positive integers, got {option!r}")
    return counts
