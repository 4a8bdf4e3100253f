# Sourced by bin/run and bin/test: create the virtualenv $VENV (.venv by default) with $PYTHON
# (Python 3.11 by default) and install the requirements files given.
# Usage: . bin/_venv.sh requirements.txt [more.txt ...]
set -euo pipefail
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
stamp="$VENV/.installed-$(printf '%s-' "$@" | tr '/' '_')"
fresh=1
[ -f "$stamp" ] || fresh=0
for file in "$@" requirements.txt requirements-test.txt; do
  [ "$file" -nt "$stamp" ] && fresh=0
done
if [ "$fresh" = 0 ]; then
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet $(printf -- '-r %s ' "$@")
  touch "$stamp"
fi
