"""--lora-modules adapters that fail to load at startup: each is left out with its reason (the load endpoint's words)
and a log line naming it, the good ones serve, and a later load of that name clears the failure; a Hugging Face id
is read from the Hub cache (offline here), as vLLM resolves one. The server side
(the base model keeps serving, /debug/engine lists the failure) is tests/integration/server/test_lora_startup.py."""

import json
import logging
import shutil
from types import SimpleNamespace

import torch
from floodway.engine.lora import peft_format
from floodway.engine.lora.manager import FailedAdapter, LoRAManager

# Our decoder's linears for a 2-layer model of hidden size 8 (what an adapter must match).
GEOMETRY = peft_format.Geometry(2, {"qkv": (8, (8, 4, 4)), "o_proj": (8, (8,)), "gate_up": (8, (16, 16)),
                                    "down_proj": (16, (8,))})
KEY = "base_model.model.model.layers.0.self_attn.q_proj.lora_{}.weight"


def adapter(folder, r: int = 2, hidden: int = 8, config: str | None = None) -> str:
    """A PEFT folder adapting layer 0's q_proj with rank r (hidden: the input size its lora_A was made for)."""
    from safetensors.torch import save_file

    folder.mkdir()
    (folder / peft_format.CONFIG_FILE).write_text(config or json.dumps({"peft_type": "LORA", "r": r,
                                                                         "lora_alpha": 2 * r}))
    save_file({KEY.format("A"): torch.ones(r, hidden), KEY.format("B"): torch.ones(8, r)},
              str(folder / peft_format.WEIGHTS_FILE))
    return str(folder)


def manager(*modules: str) -> LoRAManager:
    cfg = SimpleNamespace(max_lora_rank=4, max_loras=2, max_cpu_loras=None, lora_modules=list(modules))
    return LoRAManager(cfg, SimpleNamespace(geometry=GEOMETRY, dtype=torch.float32))


def test_bad_startup_adapters_are_left_out_with_their_reasons_and_logged(tmp_path, caplog):
    good = adapter(tmp_path / "good")
    bad = {"gone": str(tmp_path / "nowhere"), "broken": adapter(tmp_path / "broken", config="{"),
           "big": adapter(tmp_path / "big", r=8), "other": adapter(tmp_path / "other", hidden=10)}
    with caplog.at_level(logging.WARNING, logger="floodway.engine"):
        m = manager(f"good={good}", *(f"{n}={p}" for n, p in bad.items()))
    assert [a.name for a in m.registry.all()] == ["good"]
    assert list(m.failed) == list(bad) and {f.path for f in m.failed.values()} == set(bad.values())
    for name, words in (("gone", "no adapter folder"), ("broken", "not valid JSON"),
                        ("big", "--max-lora-rank 4"), ("other", "base-model mismatch")):
        assert words in m.failed[name].reason, m.failed[name]
        assert any(f"'{name}'" in r.getMessage() and m.failed[name].reason in r.getMessage()
                   for r in caplog.records), name


def test_a_later_load_of_that_name_clears_the_failure(tmp_path):
    m = manager(f"late={tmp_path / 'late'}")
    assert m.failed["late"] == FailedAdapter("late", str(tmp_path / "late"), f"no adapter folder at "
                                                                            f"{str(tmp_path / 'late')!r}")
    m.load("late", adapter(tmp_path / "late"))
    assert m.failed == {} and m.registry.get("late") is not None


def hub_cache(root, repo: str, files_from: str) -> None:
    """A Hugging Face Hub cache holding `repo` at main, laid out as huggingface_hub writes it."""
    commit = "0" * 40
    d = root / f"models--{repo.replace('/', '--')}"
    (d / "refs").mkdir(parents=True)
    (d / "refs" / "main").write_text(commit)
    shutil.copytree(files_from, d / "snapshots" / commit)


def test_a_hugging_face_id_is_read_from_the_hub_cache_and_an_unknown_one_fails_clearly(tmp_path, monkeypatch):
    import huggingface_hub.constants

    assert huggingface_hub.constants.HF_HUB_OFFLINE  # tests/conftest.py: nothing here downloads
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    hub_cache(tmp_path / "hub", "org/fmt-lora", adapter(tmp_path / "fmt"))
    m = manager("fmt=org/fmt-lora", "nope=org/no-such-lora")
    assert [a.name for a in m.registry.all()] == ["fmt"] and m.registry.get("fmt").path.endswith("0" * 40)
    assert "no adapter folder at 'org/no-such-lora', nor a Hugging Face model of that id" in m.failed["nope"].reason
