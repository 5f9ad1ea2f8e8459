"""Streamed text against the tokenizer's own decode of all the ids (the oracle): on the built-in tiny tokenizer and
SmolLM2's, for text with multi-byte characters and emoji split over tokens, and for random ids (byte tokens that
leave a character incomplete, special tokens, ids past the tokenizer's vocabulary, as a padded embedding emits)."""

import random

import pytest
from floodway.engine.detokenizer import Detokenizer
from transformers import AutoTokenizer

TEXT = "Hello, wörld! 日本語のテキスト 🙂🚀 naïve café\n\tdef f(x):\n    return x ** 2  # ok\n"


@pytest.fixture(params=["tiny", "smollm2"])
def tokenizer(request):
    name = "tiny_model_path" if request.param == "tiny" else "smollm2_path"
    return AutoTokenizer.from_pretrained(request.getfixturevalue(name))


def _streamed(tok, ids: list[int]) -> str:
    d = Detokenizer(tok, [])
    out = ""
    for t in ids:
        assert d.add(t) is None
        out += d.take_new(False)
    return out + d.take_new(True)


def test_streamed_text_is_the_tokenizers_decode(tokenizer):
    rnd = random.Random(0)
    encoded = tokenizer(TEXT * 3, add_special_tokens=False).input_ids
    assert _streamed(tokenizer, encoded) == tokenizer.decode(encoded, skip_special_tokens=True) == TEXT * 3
    for seed in range(5):
        rnd.seed(seed)
        ids = [rnd.randrange(len(tokenizer) + 50) for _ in range(200)] + encoded
        assert _streamed(tokenizer, ids) == tokenizer.decode(ids, skip_special_tokens=True)
