# kafleet worker, sidecar and operator image.
# A first cut: the packaging issue hardens it (non-root user, pinned digest, slim layers) and
# `make kind-e2e` builds it. No Docker engine runs in this project's CI, so it is not built there.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY consumer ./consumer
COPY operator ./operator
RUN pip install --no-cache-dir '.[operator]'
USER 65532:65532
ENTRYPOINT ["kafleet"]
