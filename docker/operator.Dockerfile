# The control-plane image: operator, gateway, planner and `floodway up`'s control code. No torch.
# Build from the repository root:  docker build -f docker/operator.Dockerfile -t floodway/operator:0.1.0 .
FROM python:3.12-slim

ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONSAFEPATH=1 PYTHONUNBUFFERED=1 HOME=/tmp

WORKDIR /src
COPY pyproject.toml setup.py README.md ./
RUN mkdir -p engine operator && touch engine/__init__.py operator/__init__.py \
    && pip install . && pip uninstall -y floodway
COPY engine engine
COPY operator operator
# The control plane must never need torch: fail the build if importing it would.
RUN pip install --no-deps . && rm -rf /src \
    && python -c "import sys, floodway.operator.cli; assert 'torch' not in sys.modules"

RUN useradd --uid 1000 --no-create-home floodway
USER 1000:1000
WORKDIR /tmp
EXPOSE 8080
CMD ["floodway", "operator"]
