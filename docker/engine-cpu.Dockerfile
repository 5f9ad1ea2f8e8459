# The engine image for CPUs (kind, minikube, laptops): `floodway engine` on the built-in model or small ones.
# Build from the repository root:  docker build -f docker/engine-cpu.Dockerfile -t floodway/engine-cpu:0.1.0 .
# TORCH_INDEX_URL: set it to PyTorch's CPU wheel index to skip the CUDA libraries (a much smaller image);
# left empty, pip takes torch from PyPI, which also runs on CPU.
FROM python:3.12-slim
ARG TORCH_INDEX_URL=""

ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONSAFEPATH=1 PYTHONUNBUFFERED=1 \
    HOME=/cache HF_HOME=/cache/huggingface FLOODWAY_CACHE=/cache/floodway HF_HUB_OFFLINE=1

WORKDIR /src
COPY pyproject.toml setup.py README.md ./
RUN if [ -n "$TORCH_INDEX_URL" ]; then pip install --index-url "$TORCH_INDEX_URL" torch; fi \
    && mkdir -p engine operator && touch engine/__init__.py operator/__init__.py \
    && pip install ".[engine]" && pip uninstall -y floodway
COPY engine engine
COPY operator operator
RUN pip install --no-deps . && rm -rf /src

RUN useradd --uid 1000 --home-dir /cache --no-create-home floodway && mkdir -p /cache && chown 1000:1000 /cache
USER 1000:1000
WORKDIR /cache
EXPOSE 8000
CMD ["floodway", "engine", "--model", "floodway/tiny-llama", "--host", "0.0.0.0", "--port", "8000"]
