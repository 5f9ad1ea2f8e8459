"""Built-in offline models: small seeded random transformers models with our own tokenizer, and one trained model,
SmolLM2-135M-Instruct, converted from a packaged GGUF file (`smollm2.py`).

`resolve_model("floodway/tiny-llama")` writes the model once into a cache folder in Hugging Face format
(config.json, model.safetensors, tokenizer files) and returns that folder, so that loading goes through
the same transformers code path as a Hub id or a local folder. Other names pass through unchanged.
This module is torch-free at import time: the planner reads built-in configs without torch.
"""

import contextlib
import fcntl
import hashlib
import json
import os
import pathlib
import shutil
import tempfile
from collections.abc import Callable

from floodway.engine.models import smollm2

DATA = pathlib.Path(__file__).parent / "data"
TOKENIZER_FILE = DATA / "tokenizer.json"
VOCAB_SIZE = 4096
EOS, IM_START, IM_END, PAD = "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"
SPECIAL_TOKENS = [EOS, IM_START, IM_END, PAD]  # ids 0..3, in this order
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Architecture presets: small enough for CPU tests, shaped like the real families (GQA where they have it).
ARCHITECTURES: dict[str, dict] = {
    "llama": dict(model_type="llama", hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                  num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=2048),
    "qwen2": dict(model_type="qwen2", hidden_size=256, intermediate_size=688, num_hidden_layers=3,
                  num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=2048),
    "mistral": dict(model_type="mistral", hidden_size=256, intermediate_size=688, num_hidden_layers=3,
                    num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=2048,
                    sliding_window=None),
    "gpt2": dict(model_type="gpt2", n_embd=256, n_layer=3, n_head=8, n_positions=2048),
    # The benchmark's ~155M model: hidden 1024, 8 layers, 16 heads, 4 KV heads.
    "llama-150m": dict(model_type="llama", hidden_size=1024, intermediate_size=5120, num_hidden_layers=8,
                       num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=4096),
    # The trained model's shape, for the torch-free planner (a test checks it against the converted config.json).
    "smollm2-135m": dict(model_type="llama", hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, head_dim=64, max_position_embeddings=8192,
                         vocab_size=49152, bos_token_id=1, eos_token_id=2, pad_token_id=2, tie_word_embeddings=True),
}
BUILTIN_MODELS = {"floodway/tiny-llama": "llama", "floodway/llama-150m": "llama-150m",
                  smollm2.NAME: "smollm2-135m"}
FORMAT_VERSION = 1  # bump when the written files change, so caches refresh


def model_config(arch: str, **overrides) -> dict:
    """The config.json contents for an architecture preset (pure; no torch). Presets without their own vocabulary
    use the built-in tokenizer's."""
    cfg = dict(vocab_size=VOCAB_SIZE, bos_token_id=0, eos_token_id=0, pad_token_id=3, tie_word_embeddings=False,
               torch_dtype="float32")
    return {**cfg, **ARCHITECTURES[arch], **overrides}


def cache_root() -> pathlib.Path:
    return pathlib.Path(os.environ.get("FLOODWAY_CACHE", pathlib.Path.home() / ".cache" / "floodway"))


def is_builtin(name: str) -> bool:
    return name in BUILTIN_MODELS


def resolve_model(name_or_path: str) -> str:
    """A built-in name becomes its materialised folder; anything else is returned as given."""
    if not is_builtin(name_or_path):
        return name_or_path
    if name_or_path == smollm2.NAME:
        gguf, version = smollm2.gguf_path()
        return write_once(smollm2.folder_for(cache_root(), version), lambda tmp: smollm2.convert(gguf, tmp))
    arch = BUILTIN_MODELS[name_or_path]
    cfg = model_config(arch)
    key = hashlib.sha256(json.dumps([FORMAT_VERSION, cfg, TOKENIZER_FILE.read_text()], sort_keys=True)
                         .encode()).hexdigest()[:12]
    folder = cache_root() / "models" / f"{name_or_path.split('/')[-1]}-{key}"
    if not (folder / "config.json").exists():
        write_random_model(folder, arch, seed=0)
    return str(folder)


def write_once(folder: pathlib.Path, fill: Callable[[pathlib.Path], None]) -> str:
    """Makes `folder` by `fill(tmp)` into a temporary sibling renamed into place, unless it exists. A lock file
    makes concurrent processes wait for one writer instead of each doing the work; the rename keeps readers from
    ever seeing a half-written folder even without the lock (another machine sharing the cache)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / "config.json").exists():
            return str(folder)
        tmp = pathlib.Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}-"))
        try:
            fill(tmp)
            # Readable by every user (mkdtemp makes 0700, transformers writes weights 0600): a shared cache, or the
            # folder on a volume mounted into a pod that runs as another uid.
            for p in (tmp, *tmp.rglob("*")):
                p.chmod(0o755 if p.is_dir() else 0o644)
            with contextlib.suppress(OSError):  # another writer finished first; its copy is identical
                tmp.rename(folder)
            if not (folder / "config.json").exists():
                raise RuntimeError(f"could not write {folder}")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return str(folder)


def write_tokenizer(folder: pathlib.Path) -> None:
    shutil.copy(TOKENIZER_FILE, folder / "tokenizer.json")
    (folder / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": None, "eos_token": EOS,
        "pad_token": PAD, "model_max_length": 1_000_000, "clean_up_tokenization_spaces": False,
    }, indent=2))


def write_random_model(folder: str | os.PathLike, arch: str = "llama", seed: int = 0, device: str = "cpu",
                       dtype: str = "float32", **overrides) -> str:
    """Writes a seeded random model of `arch` with the built-in tokenizer; atomic against concurrent writers.
    Initialised on `device` and saved in `dtype` (on a GPU an 8B-parameter shape takes seconds, not minutes)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    cfg = model_config(arch, **{"torch_dtype": dtype, **overrides})

    def fill(tmp: pathlib.Path) -> None:
        torch.manual_seed(seed)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg), dtype=getattr(torch, dtype))
        model.save_pretrained(tmp)
        eos_ids = [SPECIAL_TOKENS.index(EOS), SPECIAL_TOKENS.index(IM_END)]
        GenerationConfig(eos_token_id=eos_ids, pad_token_id=cfg["pad_token_id"]).save_pretrained(tmp)
        write_tokenizer(tmp)

    return write_once(pathlib.Path(folder), fill)
