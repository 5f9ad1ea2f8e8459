"""The package layout, the CLI and the built-in offline model."""

import json
import subprocess
import sys

import click
import pytest
import typer.main
from floodway.engine.models.builtin import (
    ARCHITECTURES,
    IM_END,
    VOCAB_SIZE,
    resolve_model,
    write_random_model,
)
from floodway.operator.cli import app


def test_operator_import_does_not_load_torch():
    code = ("import sys, floodway.operator, floodway.operator.cli; "
            "bad = sorted(m for m in ('torch', 'transformers') if m in sys.modules); print(bad); "
            "sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_stdlib_operator_is_not_shadowed():
    import operator

    assert hasattr(operator, "itemgetter")


def _commands(group: click.Group, prefix=()):
    for name, cmd in group.commands.items():
        yield (*prefix, name)
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, (*prefix, name))


def test_every_subcommand_has_help(floodway_cmd):
    top = subprocess.run([*floodway_cmd, "--help"], capture_output=True, text=True)
    assert top.returncode == 0 and "bench" in top.stdout
    group = typer.main.get_command(app)
    paths = list(_commands(group))
    assert ("generate",) in paths
    from typer.testing import CliRunner

    runner = CliRunner()
    for path in paths:
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "Usage" in result.output


def test_builtin_model_loads_offline_and_generates(tiny_model_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert json.loads(open(f"{tiny_model_path}/config.json").read())["model_type"] == "llama"
    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    ids = tok("The quick brown fox", return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=8, do_sample=False, min_new_tokens=8)
    assert out.shape[1] == ids.shape[1] + 8
    assert resolve_model("floodway/tiny-llama") == tiny_model_path  # cached, not rewritten


def test_tokenizer_round_trip_and_chat_template(tiny_model_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    assert len(tok) == VOCAB_SIZE
    text = "Licensed under the Apache License, Version 2.0 — naïve café ✓"
    assert tok.decode(tok(text).input_ids) == text
    prompt = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                     add_generation_prompt=True)
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.convert_tokens_to_ids(IM_END) == 2


@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral", "gpt2"])
def test_random_architectures_load(tmp_path, arch):
    import torch
    from transformers import AutoModelForCausalLM

    path = write_random_model(tmp_path / arch, arch, seed=1)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.config.model_type == ARCHITECTURES[arch]["model_type"]
    logits = model(torch.tensor([[5, 6, 7]])).logits
    assert logits.shape == (1, 3, VOCAB_SIZE) and torch.isfinite(logits).all()


def test_resolve_passes_other_names_through():
    assert resolve_model("Qwen/Qwen2.5-7B-Instruct") == "Qwen/Qwen2.5-7B-Instruct"
    assert resolve_model("/models/mine") == "/models/mine"
