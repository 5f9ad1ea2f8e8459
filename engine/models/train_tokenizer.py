"""Trains the built-in model's byte-level BPE tokenizer (a maintainer's tool, not run at serve time).

The result ships as package data (data/tokenizer.json), so that nothing downloads a tokenizer.
Corpus: the licence texts Debian ships and the docstrings of Python's standard library, both on every
machine that runs this, giving English prose plus code.

    python -P -m floodway.engine.models.train_tokenizer
"""

import ast
import pathlib
import sysconfig

from floodway.engine.models.builtin import SPECIAL_TOKENS, TOKENIZER_FILE, VOCAB_SIZE
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers


def corpus() -> list[str]:
    texts = [p.read_text(errors="ignore") for p in sorted(pathlib.Path("/usr/share/common-licenses").glob("*"))
             if p.is_file()]
    for path in sorted(pathlib.Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        try:
            tree = ast.parse(path.read_text(errors="ignore"))
        except SyntaxError:
            continue
        texts += [doc for node in ast.walk(tree)
                  if isinstance(node, ast.FunctionDef | ast.ClassDef | ast.Module)
                  and (doc := ast.get_docstring(node))]
    return texts


def train() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(), trainer=trainer)
    return tok


if __name__ == "__main__":
    tok = train()
    tok.save(str(TOKENIZER_FILE))
    print(f"wrote {TOKENIZER_FILE} ({tok.get_vocab_size()} tokens)")
