"""Incremental detokenization with stop strings.

Each token's text comes from the `tokenizers` library's DecodeStream, which keeps the left context a token's text
depends on (byte-level BPE, SentencePiece's leading spaces) and returns nothing while the bytes so far end inside a
UTF-8 character. Through the Rust tokenizer that costs about a microsecond a token, against about ten for decoding a
window twice through transformers' `decode`: per sequence and step, on every step of a large batch. Text is held
back by (longest stop string - 1) characters so that streamed text never contains the start of a stop string.
"""

from tokenizers.decoders import DecodeStream


class Detokenizer:
    def __init__(self, tokenizer, stop: list[str]):
        """tokenizer: transformers' (fast) tokenizer; its Rust `backend_tokenizer` decodes."""
        self.backend = tokenizer.backend_tokenizer
        self.stream = DecodeStream(skip_special_tokens=True)
        self.stop = stop
        self.hold = max((len(s) for s in stop), default=1) - 1
        self.text = ""
        self.emitted = 0

    def add(self, token_id: int, check_stop: bool = True) -> str | None:
        """Adds a token; returns the stop string it completed (text is cut before it), else None. Without
        check_stop (before min_tokens) stop strings are not looked for."""
        self.text += self.stream.step(self.backend, token_id) or ""
        found = [(self.text.find(s, self.emitted), s) for s in self.stop] if check_stop else []
        found = [(i, s) for i, s in found if i >= 0]
        if not found:
            return None
        idx, s = min(found)
        self.text = self.text[:idx]
        return s

    def take_new(self, finished: bool) -> str:
        """Text not yet handed out, minus what may still turn into a stop string unless finished."""
        upto = len(self.text) if finished else max(self.emitted, len(self.text) - self.hold)
        new = self.text[self.emitted:upto]
        self.emitted = upto
        return new
