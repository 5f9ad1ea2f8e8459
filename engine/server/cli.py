"""`floodway engine` (the OpenAI-compatible server) and `floodway bench serve` (guidellm against a server).

Flags are named as vLLM names them where the meaning is the same. Heavy imports stay inside commands.
"""

import logging

import typer


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    @app.command()
    def engine(
        model: str = typer.Option("floodway/tiny-llama", help="Hugging Face id, local folder or built-in name."),
        host: str = typer.Option("0.0.0.0", help="Address to listen on."),
        port: int = typer.Option(8000, help="Port to listen on."),
        tokenizer: str = typer.Option(None, help="Tokenizer id or folder (default: the model's)."),
        served_model_name: str = typer.Option(None, help="Model name in the API (default: --model)."),
        dtype: str = typer.Option("auto", help="auto, float32, float16 or bfloat16."),
        device: str = typer.Option("auto", help="auto, cpu or cuda[:N]."),
        max_model_len: int = typer.Option(None, help="Context length (default: min(model's, 4096))."),
        max_num_seqs: int = typer.Option(64, help="Most sequences in one batch."),
        max_num_batched_tokens: int = typer.Option(2048, help="Token budget of one engine step."),
        block_size: int = typer.Option(16, help="Tokens per KV-cache block."),
        gpu_memory_utilization: float = typer.Option(0.9, help="Share of GPU memory for weights + KV cache."),
        kv_cache_bytes: int = typer.Option(None, help="KV-cache budget in bytes on CPU."),
        num_kv_blocks: int = typer.Option(None, help="Exact number of KV blocks (overrides the budgets)."),
        enable_prefix_caching: bool = typer.Option(True, "--enable-prefix-caching/--no-enable-prefix-caching"),
        enable_chunked_prefill: bool = typer.Option(True, "--enable-chunked-prefill/--no-enable-chunked-prefill"),
        seed: int = typer.Option(0, help="Seed of the engine's sampler."),
        step_delay_ms: int = typer.Option(0, help="Testing/demo knob: each engine step takes at least this many "
                                                  "ms more (slept in the engine thread), making capacity scarce."),
        tpot_slo_ms: float = typer.Option(0.0, help="TPOT protection: while sequences decode, each step carries only "
                                                    "the prefill tokens that keep it within this many ms (0: off)."),
        max_waiting_requests: int = typer.Option(256, help="Admission bound: waiting requests (0: unbounded)."),
        max_waiting_tokens: int = typer.Option(0, help="Admission bound: waiting prompt tokens (0: unbounded)."),
        max_body_bytes: int = typer.Option(4 * 2**20, help="Largest request body accepted (413 beyond)."),
        drain_timeout: float = typer.Option(30.0, help="Seconds in-flight requests get to finish after SIGTERM."),
        log_level: str = typer.Option("info", help="Log level."),
    ) -> None:
        """Serve a model over the OpenAI API (/v1/completions, /v1/chat/completions, /v1/models, /health,
        /ready, /metrics), with admission control (429 + Retry-After) and graceful drain on SIGTERM."""
        from floodway.engine.config import EngineConfig
        from floodway.engine.server.state import ServerOptions

        config = EngineConfig(
            model=model, tokenizer=tokenizer, dtype=dtype, device=device, max_model_len=max_model_len,
            max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens, block_size=block_size,
            gpu_memory_utilization=gpu_memory_utilization, kv_cache_bytes=kv_cache_bytes, num_kv_blocks=num_kv_blocks,
            enable_prefix_caching=enable_prefix_caching, enable_chunked_prefill=enable_chunked_prefill, seed=seed,
            served_model_name=served_model_name, step_delay_ms=step_delay_ms, tpot_slo_ms=tpot_slo_ms)
        options = ServerOptions(max_waiting_requests=max_waiting_requests or None,
                                max_waiting_tokens=max_waiting_tokens or None, max_body_bytes=max_body_bytes,
                                drain_timeout_s=drain_timeout)
        try:
            config.validate()
            options.validate()
        except ValueError as e:
            raise typer.BadParameter(str(e)) from e
        from floodway.engine.server.app import create_app
        from floodway.engine.server.drain import serve

        logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        serve(create_app(config, options), host, port, log_level.lower())

    from floodway.engine.server.bench_cli import register_bench

    register_bench(bench_app)
