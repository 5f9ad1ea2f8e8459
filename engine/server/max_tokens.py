"""How many tokens a request asks to generate, by the OpenAI API's rules. Torch-free: the engine and the gateway
(operator/gateway/payload.py) both read it, so the two cannot disagree."""

DEFAULT_MAX_TOKENS = 16  # the completions API's default where a request names no max_tokens


def requested_max_tokens(max_completion_tokens: object, max_tokens: object) -> object:
    """The limit a request names: max_completion_tokens (the chat API's newer name) where present, else max_tokens;
    None where it names neither. Values are returned as given: the caller's request model validates them."""
    return max_completion_tokens if max_completion_tokens is not None else max_tokens
