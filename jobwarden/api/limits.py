"""Request bodies are bounded before anything parses them (DESIGN: bounded input).

An ASGI middleware: a Content-Length over the limit is refused at once; a body
without one (chunked) is counted while it is read, and refused when it passes the
limit, so no route ever holds more than the limit in memory.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobwarden.api.problems import ProblemError, problem_response


class BodyTooLargeError(ProblemError):
    def __init__(self, limit: int) -> None:
        super().__init__(
            413, "body_too_large", f"the body is larger than {limit} bytes", limit=limit
        )


class BodyLimit:
    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > limit or declared < 0:
                    response = problem_response(
                        413 if declared > limit else 400,
                        "body_too_large" if declared > limit else "bad_request",
                        f"the body is larger than {limit} bytes"
                        if declared > limit
                        else "Content-Length is not a number",
                        instance=scope.get("path"),
                        extensions={"limit": limit} if declared > limit else None,
                    )
                    await response(scope, receive, send)
                    return
        seen = 0

        async def bounded() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLargeError(limit)
            return message

        await self.app(scope, bounded, send)
