# Sourced by scripts/test and scripts/demo: make .venv with the project and the extras the
# caller names in JOBWARDEN_EXTRAS (scripts/test: "test", everything the suite drives;
# scripts/demo: "" — the core alone, which is all the demo runs).
VENV="${JOBWARDEN_VENV:-.venv}"
PY="${PYTHON:-python3}"
EXTRAS="${JOBWARDEN_EXTRAS-test}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
# Reinstall only when the dependency list changed; the test extras cover every other set.
STAMP="$VENV/.jobwarden-installed-${EXTRAS:-core}"
FULL="$VENV/.jobwarden-installed-test"
if { [ ! -f "$FULL" ] || [ pyproject.toml -nt "$FULL" ]; } &&
    { [ ! -f "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ]; }; then
    "$VENV/bin/python" -m pip install -q --upgrade pip
    # --no-compile: byte-compiling every installed module took most of a core for tens of
    # seconds; a module is compiled when first imported instead, and most never are.
    "$VENV/bin/python" -m pip install -q --no-compile -e ".${EXTRAS:+[$EXTRAS]}"
    touch "$STAMP"
fi

# check_service NAME DEFAULT_URL VARIABLE...: the first VARIABLE that is set (else DEFAULT_URL)
# names the server; exit with one line naming that variable and address when nothing answers.
# Unix sockets count: ?host=/dir for PostgreSQL, unix:///path for Redis.
check_service() {
    "$VENV/bin/python" - "$@" <<'PY'
import os, socket, sys
from urllib.parse import parse_qs, urlsplit

name, default, variables = sys.argv[1], sys.argv[2], sys.argv[3:]
variable = next((v for v in variables if os.environ.get(v)), None)
raw = os.environ[variable] if variable else default
where = f"{variable}" if variable else f"the default ({' / '.join(variables)} not set)"
try:
    url = urlsplit(raw)
    default_port = 6379 if url.scheme.startswith(("redis", "rediss", "valkey")) else 5432
    query = parse_qs(url.query)
    if url.scheme == "unix":
        target, address = url.path, url.path
    elif not url.hostname and query.get("host", [""])[0].startswith("/"):
        port = url.port or int(query.get("port", [default_port])[0])
        address = query["host"][0]
        target = f"{address}/.s.PGSQL.{port}"
    else:
        host, port = url.hostname or "127.0.0.1", url.port or default_port
        target, address = (host, port), f"{host}:{port}"
except ValueError as exc:
    sys.exit(f"{name}: cannot read {where}: {exc}")
try:
    if isinstance(target, str):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(3)
            s.connect(target)
    else:
        socket.create_connection(target, timeout=3).close()
except OSError as exc:
    reason = exc.strerror or type(exc).__name__
    sys.exit(f"{name} is not reachable at {address} ({reason}), from {where}; "
             "start it or point the variable at a running server (see README)")
PY
}
