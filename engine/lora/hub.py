"""Where an adapter's files are, as vLLM resolves a lora path: a local folder as given, else a Hugging Face model id
fetched into the Hub cache (the adapter's two files only; a gated or private one with HF_TOKEN, which the
InferenceService's engine.hfTokenSecretRef sets). So spec.adapters[].source takes the same sources as spec.model."""

import pathlib
import re

from floodway.engine.lora.peft_format import CONFIG_FILE, WEIGHTS_FILE, LoRANotFound

# A Hub model id: `name` or `owner/name`; anything else (an absolute path, ../x) is a folder or nothing.
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")


def local_folder(path: str) -> str:
    """The folder holding the adapter at `path` (fetched first when it names a Hub model). Raises LoRANotFound."""
    if pathlib.Path(path).is_dir() or not HUB_ID.match(path):
        return path  # read_config names a missing folder
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(path, allow_patterns=[CONFIG_FILE, WEIGHTS_FILE])
    except Exception as e:  # noqa: BLE001 - offline, unknown, gated, a bad id, the network: it is not to be had
        raise LoRANotFound(f"no adapter folder at {path!r}, nor a Hugging Face model of that id to fetch "
                           f"({type(e).__name__}: {e})") from None
