"""A Hugging Face Llama or Qwen2 folder written as a GGUF file by the `gguf` package (its GGUFWriter and its own
quantizers), in llama.cpp's converter's layout: 2-D weights as the given type, the rest F32, Llama's q/k rows
reordered for its rope. What the GPU check serves as a Q4_1 file, and the tests' seeded GGUF models."""

ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2"}  # transformers' model_type -> GGUF architecture


def write_gguf(folder: str, out, kind: str) -> None:
    """The folder's model as a GGUF file of `kind` (Q4_1, Q8_0, Q4_0, ...). A tied output head is written once
    (as the token table, which it is)."""
    import gguf
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    cfg = model.config
    arch = ARCHITECTURES[cfg.model_type]
    w = gguf.GGUFWriter(str(out), arch)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA if arch == "llama" else gguf.MODEL_ARCH.QWEN2,
                                     cfg.num_hidden_layers)
    qtype = gguf.GGMLQuantizationType[kind]
    for name, t in model.named_parameters():  # a tied parameter once
        data = t.detach().numpy()
        if arch == "llama" and name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = cfg.num_attention_heads if "q_proj" in name else cfg.num_key_value_heads
            data = data.reshape(heads, 2, data.shape[0] // heads // 2, -1).swapaxes(1, 2).reshape(data.shape)
        kind_here = qtype if data.ndim == 2 else gguf.GGMLQuantizationType.F32
        w.add_tensor(names.get_name(name, try_suffixes=(".weight", ".bias")), gguf.quants.quantize(data, kind_here),
                     raw_dtype=kind_here)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
