"""Engine commands that need no server: offline generation and the engine benchmark."""

import typer


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    @app.command()
    def generate(
        prompt: str = typer.Argument(..., help="Prompt text."),
        model: str = typer.Option("floodway/tiny-llama", help="Hugging Face id, local folder or built-in name."),
        max_tokens: int = typer.Option(32, help="Tokens to generate."),
    ) -> None:
        """Generate a completion offline (no server)."""
        from floodway.engine.models.builtin import resolve_model
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = resolve_model(model)
        tok = AutoTokenizer.from_pretrained(path)
        lm = AutoModelForCausalLM.from_pretrained(path)
        ids = tok(prompt, return_tensors="pt").input_ids
        out = lm.generate(ids, max_new_tokens=max_tokens, do_sample=False)
        typer.echo(tok.decode(out[0, ids.shape[1]:]))
