"""llama.cpp's llama-server as a baseline of the served chat benchmark: its binary (e2e/llamacpp/build.sh builds and
caches it), the GGUF files it serves, and its command line as the operator renders it for `runtime: llamacpp`.

SmolLM2's package ships a Q4_1 GGUF. `rewrite_gguf` rewrites that file with every matrix dequantized and stored
as F32, BF16, Q8_0 or Q4_0 by the `gguf` package's own quantizer (norms stay F32, as llama.cpp's converter keeps
them) and all metadata copied (tokenizer, chat template), so both servers compute with the same weights. K-quant
files (K_QUANTS) are made from the F32 rewrite by llama-quantize, the format's own packer, which picks each tensor's
type as it does for users (rows not in whole 256-element super-blocks fall back to Q5_0, Q5_1 or Q8_0).
"""

import os
import pathlib
import subprocess

BUILD = pathlib.Path(__file__).resolve().parents[2] / "e2e" / "llamacpp" / "build.sh"


def built(tool: str = "LLAMA_SERVER") -> str:
    """The path build.sh prints for `tool` (LLAMA_SERVER, LLAMA_QUANTIZE): built on first use (minutes), then
    cached."""
    out = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(f"{BUILD} failed:\n{out.stderr[-4000:]}")
    return next(line.split("=", 1)[1] for line in out.stdout.splitlines() if line.startswith(f"{tool}="))


def server_binary(path: str | None) -> str:
    """The given llama-server, else the one build.sh builds."""
    return path or built()


# llama-quantize keeps the token table and the output head above 4 bits in its 4-bit files (Q6_K); Q8_0 stands in.
HEAD_TENSORS = ("token_embd.weight", "output.weight")
FOUR_BIT = ("Q4_0", "Q4_1")
K_QUANTS = ("Q4_K_M", "Q5_K_M", "Q6_K")  # llama-quantize's file types (its most used ones)


def bf16_gguf(src: pathlib.Path, dst: pathlib.Path) -> None:
    """Writes src's model to dst with quantized tensors as BF16."""
    rewrite_gguf(src, dst, "BF16")


def rewrite_gguf(src: pathlib.Path, dst: pathlib.Path, kind: str) -> None:
    """Writes src's model to dst with every matrix as `kind` (BF16, Q8_0, Q4_0, ...), the head as HEAD_TENSORS
    says."""
    import gguf

    reader = gguf.GGUFReader(src)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(dst, arch)
    skip = (gguf.Keys.General.ARCHITECTURE, gguf.Keys.General.FILE_TYPE)
    for f in reader.fields.values():
        if f.name in skip or f.name.startswith("GGUF."):  # written by GGUFWriter itself
            continue
        value_type = f.types[0]
        writer.add_key_value(f.name, f.contents(), value_type,
                             sub_type=f.types[-1] if value_type == gguf.GGUFValueType.ARRAY else None)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if kind == "F32" else gguf.LlamaFileType[f"MOSTLY_{kind}"])
    matrix, head = gguf.GGMLQuantizationType[kind], gguf.GGMLQuantizationType.Q8_0
    float_types = (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.BF16)
    for t in reader.tensors:
        values = gguf.quants.dequantize(t.data, t.tensor_type)
        stored = gguf.GGMLQuantizationType.F32 if t.tensor_type in float_types and values.ndim == 1 \
            else head if t.name in HEAD_TENSORS and kind in FOUR_BIT else matrix
        writer.add_tensor(t.name, gguf.quants.quantize(values, stored), raw_dtype=stored)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def llama_quantize(src: str, dst: pathlib.Path, kind: str) -> None:
    """dst: src quantized by llama.cpp's llama-quantize to the file type `kind` (K_QUANTS, ...)."""
    out = subprocess.run([built("LLAMA_QUANTIZE"), src, str(dst), kind], capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(f"llama-quantize {kind} failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")


def smollm2_gguf(kind: str) -> str:
    """SmolLM2's packaged GGUF (Q4_1), its rewrite with matrices as `kind`, or (K_QUANTS) llama-quantize's file
    from the F32 rewrite (made once, cached)."""
    from floodway.engine.models.builtin import cache_root
    from floodway.engine.models.smollm2 import gguf_path

    src, version = gguf_path()
    if kind == "Q4_1":
        return str(src)
    dst = cache_root() / "models" / f"smollm2-135m-instruct-{version}-{kind.lower()}.gguf"
    if not dst.exists():
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(f".{dst.name}.{os.getpid()}")
        if kind in K_QUANTS:
            llama_quantize(smollm2_gguf("F32"), tmp, kind)
        else:
            rewrite_gguf(src, tmp, kind)
        tmp.rename(dst)  # atomic: a reader never sees a half-written file
    return str(dst)


def server_argv(binary: str, gguf: str, name: str, port: int, slots: int, max_model_len: int, threads: int,
                max_batch_tokens: int, speculative: dict | None = None) -> list[str]:
    """llama-server's command line as the operator renders it for `runtime: llamacpp` (with engine.speculative
    where given, in --speculative-config's keys), plus the thread count."""
    from floodway.operator.render.engine import engine_args
    from floodway.operator.spec import InferenceServiceSpec

    spec = InferenceServiceSpec.model_validate({
        "model": gguf, "servedModelName": name, "resources": {"gpus": 0},
        "engine": {"runtime": "llamacpp", "maxModelLen": max_model_len, "maxNumSeqs": slots,
                   "maxNumBatchedTokens": max_batch_tokens, "speculative": speculative,
                   "extraArgs": ["--threads", str(threads), "--threads-batch", str(threads)] if threads else []}})
    return [binary, *engine_args(spec, "127.0.0.1", port)]
