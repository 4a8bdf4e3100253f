# Sourced by bin/run and bin/test: create .venv with Python 3.11 and install a requirements file.
# Usage: . bin/_venv.sh requirements.txt
set -euo pipefail
PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=".venv/.installed-$(basename "$1")"
if [ ! -f "$stamp" ] || [ "$1" -nt "$stamp" ] || [ requirements.txt -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -r "$1"
  touch "$stamp"
fi
