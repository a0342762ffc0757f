# One image for every Genesis process of the production compose: api, worker, engine, watcher,
# and the migrate one-shot (docker-compose.yml names the command of each).
FROM python:3.11-slim
WORKDIR /app
COPY requirements.lock pyproject.toml ./
RUN pip install --no-cache-dir -r requirements.lock
COPY . .
RUN pip install --no-cache-dir --no-deps -e .
ENV PYTHONUNBUFFERED=1
# API (and its /metrics), engine /metrics, worker /metrics
EXPOSE 8000 9101 9102
CMD ["python", "worker.py"]
