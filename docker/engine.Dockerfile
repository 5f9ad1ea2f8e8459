# The engine image for NVIDIA GPUs: `floodway engine` with torch (CUDA) and transformers.
# Build from the repository root:  docker build -f docker/engine.Dockerfile -t floodway/engine:0.1.0 .
# PyPI's Linux torch wheels bundle the CUDA runtime libraries, so a small CUDA base with the driver hooks is enough.
ARG CUDA_BASE=nvidia/cuda:12.8.1-base-ubuntu24.04
FROM ${CUDA_BASE}

ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONSAFEPATH=1 \
    PYTHONUNBUFFERED=1 VIRTUAL_ENV=/opt/floodway PATH=/opt/floodway/bin:$PATH \
    HOME=/cache HF_HOME=/cache/huggingface FLOODWAY_CACHE=/cache/floodway
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* && python3 -m venv /opt/floodway

WORKDIR /src
# Dependencies first, so code edits do not reinstall torch.
COPY pyproject.toml setup.py README.md ./
RUN mkdir -p engine operator && touch engine/__init__.py operator/__init__.py \
    && pip install ".[engine]" && pip uninstall -y floodway
COPY engine engine
COPY operator operator
RUN pip install --no-deps . && rm -rf /src

RUN useradd --uid 1000 --home-dir /cache --no-create-home floodway && mkdir -p /cache && chown 1000:1000 /cache
USER 1000:1000
WORKDIR /cache
EXPOSE 8000
# The operator's pods run `floodway engine` with the InferenceService's flags (see operator/render/engine.py).
CMD ["floodway", "engine", "--host", "0.0.0.0", "--port", "8000"]
