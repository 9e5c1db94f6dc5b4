# Build stage: a wheel of jobwarden and its dependencies; nothing of it reaches the image
# but the wheels.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
# All the code is under jobwarden/ (the top-level models/, tasks/ ... are links into it).
COPY jobwarden ./jobwarden
# The services' doors: the HTTP API and console, the MCP server, Flower (pyproject extras).
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[api,mcp,flower]"

# Runtime stage: the installed wheels and an unprivileged user, no build tools, no sources.
FROM python:3.11-slim
RUN useradd --system --uid 10001 --home-dir /home/jobwarden --create-home jobwarden \
    && install -d -o jobwarden -g jobwarden /var/lib/jobwarden/results
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links=/wheels "jobwarden[api,mcp,flower]" \
    && rm -rf /wheels
ENV PYTHONUNBUFFERED=1
USER jobwarden
WORKDIR /home/jobwarden
ENTRYPOINT ["jobwarden"]
