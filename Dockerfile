FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY schemas schemas
COPY ledger ledger
COPY shared shared
COPY services services
COPY gpuledger_cli gpuledger_cli
COPY bench bench
COPY simulator simulator
COPY deploy deploy
RUN pip install --no-cache-dir -e '.[postgres]'
ENV PYTHONUNBUFFERED=1
CMD ["gpuledger", "--help"]
