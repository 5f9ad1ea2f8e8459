"""Incremental detokenization with stop strings.

Text is decoded over a short window of recent tokens (so a token's text can depend on its left neighbours, as
with byte-level BPE and SentencePiece), held back while it ends in an incomplete UTF-8 sequence, and held back
by (longest stop string - 1) characters so that streamed text never contains the start of a stop string.
"""


class Detokenizer:
    def __init__(self, tokenizer, stop: list[str]):
        self.tokenizer = tokenizer
        self.stop = stop
        self.hold = max((len(s) for s in stop), default=1) - 1
        self.ids: list[int] = []
        self.prefix_offset = 0
        self.read_offset = 0
        self.text = ""
        self.emitted = 0

    def add(self, token_id: int, check_stop: bool = True) -> str | None:
        """Adds a token; returns the stop string it completed (text is cut before it), else None. Without
        check_stop (before min_tokens) stop strings are not looked for."""
        self.ids.append(token_id)
        decode = self.tokenizer.decode
        before = decode(self.ids[self.prefix_offset:self.read_offset], skip_special_tokens=True)
        after = decode(self.ids[self.prefix_offset:], skip_special_tokens=True)
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self.text += after[len(before):]
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
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
