# The control-plane image: operator, gateway, planner and `floodway up`'s control code. No torch.
# Build from the repository root (e2e/images/build.sh does):
#   docker build -f docker/operator.Dockerfile -t floodway/operator:<version> .
# BASE_IMAGE, the CA secret and the wheel cache: as in docker/engine.Dockerfile.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS requirements
COPY pyproject.toml /
RUN python3 -c "import tomllib; t = tomllib.load(open('/pyproject.toml', 'rb')); p = t['project']; \
open('/requirements.txt', 'w').write('\n'.join(p['dependencies'])); \
open('/build-requirements.txt', 'w').write('\n'.join(t['build-system']['requires']))"

FROM ${BASE_IMAGE}
ENV VIRTUAL_ENV=/opt/floodway PATH=/opt/floodway/bin:$PATH PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
    PYTHONSAFEPATH=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 HOME=/tmp
RUN python3 -c "import sys; assert sys.version_info[:2] == (3, 11), 'BASE_IMAGE needs CPython 3.11: ' + sys.version" \
    && python3 -m venv "$VIRTUAL_ENV"

WORKDIR /src
COPY requirements.lock ./
COPY --from=requirements /requirements.txt /build-requirements.txt ./
RUN --mount=type=cache,id=floodway-wheels,target=/wheels,sharing=locked --mount=type=secret,id=ca \
    if [ -f /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
    && export PIP_CONSTRAINT=/src/requirements.lock \
    && pip download --dest /wheels -r requirements.txt -r build-requirements.txt \
    && pip install --no-index --find-links /wheels -r requirements.txt
COPY pyproject.toml setup.py README.md ./
COPY engine engine
COPY operator operator
# The control plane must never need torch: fail the build if it is installed or importing the CLI pulls it in.
RUN --mount=type=cache,id=floodway-wheels,target=/wheels,sharing=locked --mount=type=secret,id=ca \
    if [ -f /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
    && export PIP_CONSTRAINT=/src/requirements.lock \
    && pip download --dest /wheels -r build-requirements.txt \
    && PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheels pip install --no-deps . && pip check \
    && cd / && rm -rf /src \
    && python -c "import importlib.util as u, sys, floodway.operator.cli; \
assert u.find_spec('torch') is None and 'torch' not in sys.modules, 'torch in the control-plane image'" \
    && floodway --version

WORKDIR /tmp
RUN useradd --uid 1000 --no-create-home floodway
USER 1000:1000
EXPOSE 8080
CMD ["floodway", "operator"]
