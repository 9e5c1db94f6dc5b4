FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY models ./models
COPY tasks ./tasks
COPY config ./config
COPY migrations ./migrations
COPY jobwarden ./jobwarden
RUN pip install --no-cache-dir .
ENV PYTHONUNBUFFERED=1
ENTRYPOINT ["jobwarden"]
