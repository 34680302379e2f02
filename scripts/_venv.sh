# Sourced by scripts/demo and scripts/test: make .venv/ at the project root and
# install the project into it (again only when pyproject.toml has changed).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
EXTRAS="${1:-}"

find_python() {
  local candidate
  for candidate in "${PYTHON:-}" python3.13 python3.12 python3.11 python3; do
    [ -n "$candidate" ] || continue
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      command -v "$candidate"
      return 0
    fi
  done
  echo "snl-pbem needs Python 3.11 or newer (set PYTHON=/path/to/python3.11)" >&2
  return 1
}

if [ ! -x "$VENV/bin/python" ]; then
  PY="$(find_python)"
  echo "Creating $VENV with $PY" >&2
  "$PY" -m venv "$VENV"
fi

hash="$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)"
stamp="$VENV/.installed-$hash${EXTRAS:+-$EXTRAS}"
if [ ! -f "$stamp" ]; then
  echo "Installing snl-pbem${EXTRAS:+ [$EXTRAS]} into $VENV ..." >&2
  log="$VENV/install.log"
  if ! "$VENV/bin/python" -m pip install --disable-pip-version-check -q \
        -e "$ROOT${EXTRAS:+[$EXTRAS]}" >"$log" 2>&1; then
    cat "$log" >&2
    echo "Installing into $VENV failed (log above)" >&2
    exit 1
  fi
  find "$VENV" -maxdepth 1 -name '.installed-*' ! -name ".installed-$hash*" -delete
  touch "$stamp"
fi
