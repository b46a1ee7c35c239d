# Shadowplane: one image for every process, chosen by its command (the image's entrypoint
# is `shadowplane`): `migrate` once per release, then `api`, `worker`, `beat` and
# `dashboard`. deploy/compose.yaml runs them all; README.md, "The container image", says how.
#
#   docker build -t shadowplane:0.1.0 .
#   docker build --secret id=pip_cert,src=/path/to/ca-bundle.crt -t shadowplane:0.1.0 .
#
# It needs BuildKit (build secrets and mounts): the default where the buildx plugin is
# installed; with Docker 20.10's own client, set DOCKER_BUILDKIT=1.
#
# The base images are build arguments: the official Python slim image by default (any
# Debian-like image with Python 3.11 or newer and its venv module will do). The package
# index's certificate, where one is needed, is a build secret: it is used by pip in the
# build stage and is in no layer of the image.
ARG BUILD_IMAGE=python:3.11-slim-bookworm
ARG RUNTIME_IMAGE=python:3.11-slim-bookworm

FROM ${BUILD_IMAGE} AS build
# A C compiler and Python's headers for the compiled text reader, where the base has none
# (the slim image has its Python's headers; Debian's own Python needs python3-dev).
RUN set -eu; \
    need=""; \
    command -v cc >/dev/null || need="gcc libc6-dev"; \
    python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
        || need="$need python3-dev"; \
    python3 -c 'import ensurepip' 2>/dev/null || need="$need python3-venv"; \
    if [ -n "$need" ]; then \
        apt-get update -q && apt-get install -y -q --no-install-recommends $need \
        && rm -rf /var/lib/apt/lists/*; \
    fi
WORKDIR /src
COPY pyproject.toml setup.py MANIFEST.in README.md ./
COPY controlplane ./controlplane
COPY shadowplane_workers ./shadowplane_workers
COPY shadowplane_dashboard ./shadowplane_dashboard
# Wheels of the project and of everything it needs, for the runtime stage to install with
# no index. The compiled text reader must be in the project's wheel: a build without it
# fails here (text tasks would run about 20 times slower), never quietly.
RUN --mount=type=secret,id=pip_cert \
    --mount=type=cache,target=/root/.cache/pip \
    set -eu; \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi; \
    python3 -m venv /opt/build; \
    /opt/build/bin/pip wheel -q --disable-pip-version-check --wheel-dir /wheels /src; \
    /opt/build/bin/python -c 'import glob, sys, zipfile; \
[wheel] = glob.glob("/wheels/shadowplane-*.whl"); \
built = [n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("controlplane/compare/_") and n.endswith(".so")]; \
sys.exit(None if len(built) == 5 else f"the compiled text reader was not built into {wheel}: {built}")'

FROM ${RUNTIME_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="Shadowplane" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.description="Control plane that decides, from evidence, whether an LLM task may be served by an edge model."
ENV PATH=/opt/shadowplane/bin:$PATH \
    HOME=/var/lib/shadowplane \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The wheels come from the build stage through a mount: none of them stays in a layer.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    set -eu; \
    python3 -m venv /opt/shadowplane; \
    /opt/shadowplane/bin/pip install -q --disable-pip-version-check --no-index \
        --find-links /wheels shadowplane; \
    /opt/shadowplane/bin/pip uninstall -q -y pip; \
    useradd --uid 10001 --user-group --home-dir /var/lib/shadowplane \
        --create-home --shell /usr/sbin/nologin shadowplane; \
    chgrp 0 /var/lib/shadowplane; \
    chmod 2775 /var/lib/shadowplane
# The working folder and home: the embedded SQLite default, eval set exports and beat's
# schedule state land there (mount a volume on it to keep them; with a read-only root
# filesystem, beat needs it). It is writable by the root group too, so the image also runs
# under an arbitrary uid (docker run --user, Kubernetes runAsUser, OpenShift).
WORKDIR /var/lib/shadowplane
COPY deploy/healthcheck.py /opt/shadowplane/healthcheck.py
USER shadowplane
EXPOSE 8000 8501
# Asks the process the container runs, by its own command line: the API's /healthz and the
# dashboard's /_stcore/health on their --host and --port; any other command is healthy
# while it runs and is not stopped (deploy/healthcheck.py).
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python3", "/opt/shadowplane/healthcheck.py"]
ENTRYPOINT ["shadowplane"]
CMD ["api", "--host", "0.0.0.0", "--port", "8000"]
