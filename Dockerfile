# Build stage: a wheel of jobwarden and its dependencies; nothing of it reaches the image
# but the wheels.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
# All the code is under jobwarden/ (the top-level models/, tasks/ ... are links into it).
COPY jobwarden ./jobwarden
# What the compose services run (pyproject extras): the HTTP API and console, the MCP
# server, Flower, tracing when OTEL_* asks (api, mcp, worker) and Apprise notifications
# when an operator's contract names a channel (worker). tests/integration/test_compose.py
# derives the list from docker-compose.yml's services and holds both lines to it.
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[api,mcp,flower,otel,notify]"

# Runtime stage: the installed wheels and an unprivileged user, no build tools, no sources.
FROM python:3.11-slim
RUN useradd --system --uid 10001 --home-dir /home/jobwarden --create-home jobwarden \
    && install -d -o jobwarden -g jobwarden /var/lib/jobwarden/results
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links=/wheels "jobwarden[api,mcp,flower,otel,notify]" \
    && rm -rf /wheels
ENV PYTHONUNBUFFERED=1
USER jobwarden
WORKDIR /home/jobwarden
ENTRYPOINT ["jobwarden"]
