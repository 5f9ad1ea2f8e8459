"""`floodway generate`: offline generation with the engine, no server."""

import typer


def register(app: typer.Typer) -> None:
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
