# The control-plane image: operator, gateway, planner and `floodway up`'s control code. No torch.
# Build from the repository root (e2e/images/build.sh does):
#   docker build -f docker/operator.Dockerfile -t floodway/operator:<version> .
# BASE_IMAGE and the CA secret: as in docker/engine.Dockerfile.
ARG BASE_IMAGE=python:3.11-slim

# The project's requirements alone: the dependency layer below is rebuilt when they or the lock change, not on
# every edit of pyproject.toml.
FROM ${BASE_IMAGE} AS requirements
COPY pyproject.toml /
RUN python3 -c "import tomllib; p = tomllib.load(open('/pyproject.toml', 'rb'))['project']; \
print(*p['dependencies'], sep='\n')" > /requirements.txt

FROM ${BASE_IMAGE}
ENV VIRTUAL_ENV=/opt/floodway PATH=/opt/floodway/bin:$PATH PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
    PYTHONSAFEPATH=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 HOME=/tmp
RUN python3 -c "import sys; assert sys.version_info[:2] == (3, 11), 'BASE_IMAGE needs CPython 3.11: ' + sys.version" \
    && python3 -m venv "$VIRTUAL_ENV"

WORKDIR /src
COPY requirements.lock ./
COPY --from=requirements /requirements.txt ./
RUN --mount=type=cache,id=floodway-pip,target=/var/cache/pip,sharing=locked --mount=type=secret,id=ca \
    if [ -f /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
    && PIP_CONSTRAINT=/src/requirements.lock pip install --cache-dir /var/cache/pip -r requirements.txt
COPY pyproject.toml setup.py README.md ./
COPY engine engine
COPY operator operator
# The control plane must never need torch: fail the build if it is installed or importing the CLI pulls it in.
RUN --mount=type=cache,id=floodway-pip,target=/var/cache/pip,sharing=locked --mount=type=secret,id=ca \
    if [ -f /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
    && PIP_CONSTRAINT=/src/requirements.lock pip install --cache-dir /var/cache/pip --no-deps . \
    && cd / && rm -rf /src \
    && python -c "import importlib.util as u, sys, floodway.operator.cli; \
assert u.find_spec('torch') is None and 'torch' not in sys.modules, 'torch in the control-plane image'" \
    && floodway --version

WORKDIR /tmp
RUN useradd --uid 1000 --no-create-home floodway
USER 1000:1000
EXPOSE 8080
CMD ["floodway", "operator"]
