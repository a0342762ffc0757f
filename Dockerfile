# One image for the api and worker processes (production compose).
FROM python:3.11-slim
WORKDIR /app
COPY requirements.lock pyproject.toml ./
RUN pip install --no-cache-dir -r requirements.lock
COPY . .
RUN pip install --no-cache-dir --no-deps -e .
ENV PYTHONUNBUFFERED=1
CMD ["python", "worker.py"]
