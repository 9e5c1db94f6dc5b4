# Sourced by scripts/test and scripts/demo: make .venv with the project and its test extras.
VENV="${JOBWARDEN_VENV:-.venv}"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
# Reinstall only when the dependency list changed.
STAMP="$VENV/.jobwarden-installed"
if [ ! -f "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ]; then
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -e ".[test]"
    touch "$STAMP"
fi

check_service() {
    "$VENV/bin/python" - "$1" "$2" "$3" <<'PY'
import socket, sys
name, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
try:
    socket.create_connection((host, port), timeout=3).close()
except OSError as exc:
    sys.exit(f"{name} is not reachable on {host}:{port} ({exc}); start it first (see README)")
PY
}
