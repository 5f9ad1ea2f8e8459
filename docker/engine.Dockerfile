# The engine image, `floodway engine` with torch and transformers: one recipe for GPUs and CPUs.
# Build from the repository root (e2e/images/build.sh does, with its flags):
#   docker build -f docker/engine.Dockerfile -t floodway/engine:<version> .                        GPUs
#   docker build -f docker/engine.Dockerfile --build-arg VARIANT=cpu -t floodway/engine-cpu:<version> .
# Behind a TLS-intercepting proxy add --secret id=ca,src=/etc/ssl/certs/ca-certificates.crt (used by pip during
# the build only, never stored in the image).
# BASE_IMAGE: an image with CPython 3.11 and its venv module, the Python the lock is resolved for:
# python:3.11-slim, or the Debian base e2e/images/build.sh bootstraps. PyPI's torch brings the CUDA libraries
# as wheels, so a GPU image needs no CUDA base: the NVIDIA container runtime adds the driver (asked for by
# NVIDIA_DRIVER_CAPABILITIES); a CUDA base image with Python 3.11 works as BASE_IMAGE too.
# VARIANT=cpu leaves out triton (kernels for GPUs only, about 1 GB). The nvidia-* wheels stay: PyPI's torch
# does not import without them (measured: "libcublasLt.so.*[0-9] not found").
ARG BASE_IMAGE=python:3.11-slim

# The project's requirements alone (`.[engine]`, and the build backend's): the dependency layer below is
# rebuilt when they or the lock change, not on every edit of pyproject.toml.
FROM ${BASE_IMAGE} AS requirements
COPY pyproject.toml /
RUN python3 -c "import tomllib; t = tomllib.load(open('/pyproject.toml', 'rb')); p = t['project']; \
open('/requirements.txt', 'w').write('\n'.join([*p['dependencies'], *p['optional-dependencies']['engine']])); \
open('/build-requirements.txt', 'w').write('\n'.join(t['build-system']['requires']))"

FROM ${BASE_IMAGE}
ARG VARIANT=cuda
ENV VIRTUAL_ENV=/opt/floodway PATH=/opt/floodway/bin:$PATH PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
    PYTHONSAFEPATH=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    HOME=/cache HF_HOME=/cache/huggingface FLOODWAY_CACHE=/cache/floodway
RUN python3 -c "import sys; assert sys.version_info[:2] == (3, 11), 'BASE_IMAGE needs CPython 3.11: ' + sys.version" \
    && python3 -m venv "$VIRTUAL_ENV"

# Dependencies first, every one pinned by the lock (PIP_CONSTRAINT: unlike -c it also pins pip's isolated build
# of the project). Wheels are downloaded into a BuildKit cache mount, /wheels, and installed from there: the next
# build finds them (pip's HTTP cache cannot be relied on: some proxies strip the headers it needs), and no layer
# keeps them.
WORKDIR /src
COPY requirements.lock ./
COPY --from=requirements /requirements.txt /build-requirements.txt ./
RUN --mount=type=cache,id=floodway-wheels,target=/wheels,sharing=locked --mount=type=secret,id=ca \
    if [ -f /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
    && export PIP_CONSTRAINT=/src/requirements.lock \
    && pip download --dest /wheels -r requirements.txt -r build-requirements.txt \
    && pip install --no-index --find-links /wheels -r requirements.txt \
    && if [ "$VARIANT" = cpu ]; then pip uninstall -y triton; fi \
    && python -c "import torch, transformers; torch.ones(2) @ torch.ones(2)"
COPY pyproject.toml setup.py README.md ./
COPY engine engine
COPY operator operator
# Our CPU kernels (engine/kernels/cpu_*.c) compile during the install: a C compiler (and Python's headers where the
# base lacks them) is installed for it and removed in the same layer; libgomp1, which the kernels link, stays.
RUN --mount=type=cache,id=floodway-wheels,target=/wheels,sharing=locked --mount=type=secret,id=ca \
    if [ -f /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
    && export PIP_CONSTRAINT=/src/requirements.lock \
    && pip download --dest /wheels -r build-requirements.txt \
    && headers=$(python3 -c "import os, sysconfig; print('' if os.path.exists(sysconfig.get_paths()['include'] \
+ '/Python.h') else 'libpython3-dev')") \
    && apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev libgomp1 $headers \
    && PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheels pip install --no-deps . \
    && apt-mark manual libgomp1 > /dev/null && apt-get purge -y --auto-remove gcc libc6-dev $headers \
    && apt-get clean && rm -rf /var/lib/apt/lists/* \
    && cd / && rm -rf /src && floodway --version \
    && python -c "from floodway.engine.kernels import cpu; assert cpu.lib is not None, 'the CPU kernels did not build'"

# Non-root; the root filesystem can be read-only: the engine writes only to /cache and /tmp (mount volumes).
WORKDIR /cache
RUN useradd --uid 1000 --home-dir /cache --no-create-home floodway && chown 1000:1000 /cache
USER 1000:1000
VOLUME ["/cache", "/tmp"]
EXPOSE 8000
# The operator's pods run `floodway engine` with the InferenceService's flags (see operator/render/engine.py).
CMD ["floodway", "engine", "--host", "0.0.0.0", "--port", "8000"]
