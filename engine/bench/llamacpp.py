"""llama.cpp's llama-server as a baseline of the served chat benchmark: its binary (e2e/llamacpp/build.sh builds and
caches it), the GGUF files it serves, and its command line as the operator renders it for `runtime: llamacpp`.

SmolLM2's package ships a Q4_1 GGUF; our engine serves the same weights dequantized. `bf16_gguf` rewrites that file
with every quantized tensor dequantized and stored as BF16 (norms stay F32, as llama.cpp's converter keeps them) and
all metadata copied (tokenizer, chat template), so both servers compute with the same bf16 weights.
"""

import os
import pathlib
import subprocess

BUILD = pathlib.Path(__file__).resolve().parents[2] / "e2e" / "llamacpp" / "build.sh"


def server_binary(path: str | None) -> str:
    """The given llama-server, else the one build.sh prints (built on first use: minutes, then cached)."""
    if path:
        return path
    out = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(f"{BUILD} failed:\n{out.stderr[-4000:]}")
    return out.stdout.strip().splitlines()[-1].removeprefix("LLAMA_SERVER=")


def bf16_gguf(src: pathlib.Path, dst: pathlib.Path) -> None:
    """Writes src's model to dst with quantized tensors as BF16."""
    import gguf

    reader = gguf.GGUFReader(src)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(dst, arch)
    skip = (gguf.Keys.General.ARCHITECTURE, gguf.Keys.General.FILE_TYPE)
    for f in reader.fields.values():
        if f.name in skip or f.name.startswith("GGUF."):  # written by GGUFWriter itself
            continue
        kind = f.types[0]
        writer.add_key_value(f.name, f.contents(), kind, sub_type=f.types[-1] if kind == gguf.GGUFValueType.ARRAY
                             else None)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    float_types = (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.BF16)
    for t in reader.tensors:
        values = gguf.quants.dequantize(t.data, t.tensor_type)
        kind = gguf.GGMLQuantizationType.F32 if t.tensor_type in float_types and values.ndim == 1 \
            else gguf.GGMLQuantizationType.BF16
        writer.add_tensor(t.name, gguf.quants.quantize(values, kind), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def smollm2_ggufs() -> dict[str, str]:
    """{"bf16": path, "q4_1": path}: SmolLM2's packaged GGUF and its BF16 rewrite (made once, cached)."""
    from floodway.engine.models.builtin import cache_root
    from floodway.engine.models.smollm2 import gguf_path

    src, version = gguf_path()
    dst = cache_root() / "models" / f"smollm2-135m-instruct-{version}-bf16.gguf"
    if not dst.exists():
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(f".{dst.name}.{os.getpid()}")
        bf16_gguf(src, tmp)
        tmp.rename(dst)  # atomic: a reader never sees a half-written file
    return {"bf16": str(dst), "q4_1": str(src)}


def server_argv(binary: str, gguf: str, name: str, port: int, slots: int, max_model_len: int, threads: int,
                max_batch_tokens: int) -> list[str]:
    """llama-server's command line as the operator renders it for `runtime: llamacpp`, plus the thread count."""
    from floodway.operator.render.engine import engine_args
    from floodway.operator.spec import InferenceServiceSpec

    spec = InferenceServiceSpec.model_validate({
        "model": gguf, "servedModelName": name, "resources": {"gpus": 0},
        "engine": {"runtime": "llamacpp", "maxModelLen": max_model_len, "maxNumSeqs": slots,
                   "maxNumBatchedTokens": max_batch_tokens,
                   "extraArgs": ["--threads", str(threads), "--threads-batch", str(threads)] if threads else []}})
    return [binary, *engine_args(spec, "127.0.0.1", port)]
