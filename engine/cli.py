"""Engine commands that need no server: offline generation and the engine benchmark."""

import typer


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    @app.command()
    def generate(
        prompt: str = typer.Argument(..., help="Prompt text."),
        model: str = typer.Option("floodway/tiny-llama", help="Hugging Face id, local folder or built-in name."),
        max_tokens: int = typer.Option(32, help="Tokens to generate."),
        temperature: float = typer.Option(0.0, help="0 = greedy."),
        top_p: float = typer.Option(1.0),
        top_k: int = typer.Option(0),
        seed: int | None = typer.Option(None),
        stop: list[str] = typer.Option([], help="Stop string (repeatable)."),
        chat: bool = typer.Option(None, "--chat/--no-chat", help="Send the prompt as a user message through the "
                                  "model's chat template (default: when the model has one)."),
    ) -> None:
        """Generate a completion offline (no server) with the Floodway engine."""
        from floodway.engine.llm import LLM
        from floodway.engine.sampling_params import SamplingParams

        params = SamplingParams(max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
                                seed=seed, stop=list(stop))
        try:
            params.validate()
            llm = LLM(model)
            if chat if chat is not None else bool(llm.tokenizer.chat_template):
                prompt = llm.tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                           add_generation_prompt=True, tokenize=True,
                                                           return_dict=True)["input_ids"]
            out = llm.generate([list(prompt)], params)[0]
        except ValueError as e:
            raise typer.BadParameter(str(e)) from e
        typer.echo(out.text)

    @bench_app.command("engine")
    def bench_engine(
        model: str = typer.Option("floodway/llama-150m", help="Model for all systems (built-in name, id, folder)."),
        workload: str = typer.Option("b", help="a: fixed lengths; b: Azure conversation trace; c: Mooncake prefixes; "
                                               "chat: served chat at each --concurrency against llama-server."),
        num_requests: int | None = typer.Option(None, help="Requests in the workload (default a 32, b 64, c 48)."),
        max_model_len: int = typer.Option(512, help="Engine max_model_len; trace lengths scale to it."),
        seq_requests: int = typer.Option(4, help="Requests timed for the sequential baseline (it is slow)."),
        baselines: str | None = typer.Option(None, help="Comma list of baselines to run (default: sequential,"
                                                        "static,continuous; for chat: llamacpp,llamacpp-q4_1; "
                                                        "also floodway-compile-decode, ours with that flag)."),
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
        concurrency: str = typer.Option("1,8,32", help="chat: comma list of concurrent clients, one run each."),
        max_tokens: int = typer.Option(64, help="chat: new tokens per request."),
        llama_server: str | None = typer.Option(None, help="chat: llama-server binary (default: the one "
                                                           "e2e/llamacpp/build.sh builds and caches)."),
    ) -> None:
        """Our engine vs transformers sequential generate, a static padded batch and transformers' continuous
        batching, side by side on one workload; prints tokens/s, ratios, KV usage and prefix-cache hits. With
        --workload chat: our engine's server against llama.cpp's llama-server on the same weights, over HTTP."""
        if workload == "chat":
            from floodway.engine.bench.serving import run as run_served

            run_served(model, _names(baselines, "llamacpp,llamacpp-q4_1"), _counts(concurrency), threads, dtype,
                       max_model_len, max_tokens, num_requests, llama_server)
            return
        from floodway.engine.bench.runner import run

        run(model, workload, num_requests, max_model_len, seq_requests,
            _names(baselines, "sequential,static,continuous"), profile_out, traces, threads, dtype, tpot_slo_ms, n)


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
