"""`floodway plan`: memory, KV cache, throughput, replicas and cost for a model on a GPU (no GPU needed)."""

import json

import typer
from floodway.operator.spec.models import EngineSpec

_ENGINE = EngineSpec()  # the spec's engine defaults are the planner's


def register(app: typer.Typer) -> None:
    @app.command()
    def plan(
        model: str = typer.Option(..., help="Built-in name, local folder, config.json, or a cached Hub id."),
        params: float = typer.Option(None, help="Parameter count, overriding the estimate from config.json."),
        gpu: str = typer.Option(None, help="GPU type from the table (h100-80gb, a100-40gb, a10-24gb, l4, ...)."),
        gpu_memory: str = typer.Option(None, help="GPU memory (80Gi, 24GiB, 40GB); overrides the type's."),
        gpu_bandwidth: float = typer.Option(None, help="GPU memory bandwidth in GB/s (overrides the type's)."),
        gpu_tflops: float = typer.Option(None, help="GPU dense bf16 TFLOP/s (overrides the type's)."),
        gpus: int = typer.Option(1, help="GPUs per replica (tensor parallel)."),
        dtype: str = typer.Option(_ENGINE.dtype, help="auto (bfloat16 on GPU), float32, float16, bfloat16."),
        quantization: str = typer.Option(None, help="Weight quantization: none, fp8, int8, int4, awq, gptq."),
        kv_cache_dtype: str = typer.Option(None, help="KV cache dtype (default: the compute dtype; fp8 halves it)."),
        max_model_len: int = typer.Option(None, help="Longest sequence (default: min(model positions, 4096))."),
        max_num_seqs: int = typer.Option(_ENGINE.max_num_seqs, help="Most concurrent sequences per replica."),
        gpu_memory_utilization: float = typer.Option(_ENGINE.gpu_memory_utilization,
                                                     help="Share of GPU memory the engine may use."),
        block_size: int = typer.Option(_ENGINE.block_size, help="KV cache block size in tokens."),
        overhead_gib: float = typer.Option(None, help="GiB per GPU kept for activations (default: max(1, 5% of it))."),
        rate: float = typer.Option(None, help="Expected requests per second (for the replica count)."),
        prompt_tokens: int = typer.Option(1024, help="Expected prompt tokens per request."),
        output_tokens: int = typer.Option(256, help="Expected output tokens per request."),
        slo_ttft_ms: float = typer.Option(None, help="Time-to-first-token SLO in ms."),
        slo_tpot_ms: float = typer.Option(None, help="Time-per-output-token SLO in ms (caps the batch)."),
        api_price_in: float = typer.Option(None, help="API price per million input tokens."),
        api_price_out: float = typer.Option(None, help="API price per million output tokens."),
        gpu_price_per_hour: float = typer.Option(None, help="Price of one GPU per hour in dollars (default: the "
                                                 "table's indicative price for --gpu, where it has one)."),
        profile: str = typer.Option(None, help="JSON profile from `floodway bench engine --profile-out`."),
        as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
    ) -> None:
        """Plan memory, KV cache, concurrency, throughput, replicas and cost for a model on a GPU."""
        from floodway.operator.planner.plan import PlanRequest, make_plan
        from floodway.operator.planner.report import render_text
        from floodway.operator.planner.units import PlanError

        req = PlanRequest(
            model=model, params=params, gpu=gpu, gpu_memory=gpu_memory, gpu_bandwidth_gbs=gpu_bandwidth,
            gpu_tflops=gpu_tflops, gpus=gpus, dtype=dtype, quantization=quantization, kv_cache_dtype=kv_cache_dtype,
            max_model_len=max_model_len, max_num_seqs=max_num_seqs, gpu_memory_utilization=gpu_memory_utilization,
            block_size=block_size, overhead_gib=overhead_gib, rate=rate, prompt_tokens=prompt_tokens,
            output_tokens=output_tokens, slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms,
            api_price_in=api_price_in, api_price_out=api_price_out, gpu_price_per_hour=gpu_price_per_hour,
            profile=profile)
        try:
            result = make_plan(req)
        except PlanError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None
        typer.echo(json.dumps(result, indent=2) if as_json else render_text(result))
