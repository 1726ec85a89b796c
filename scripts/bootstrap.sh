#!/usr/bin/env bash
# Creates .venv (if needed) and installs tether with its dev tools into it.
# Re-installs only when pyproject.toml changed since the last install.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null 2>&1 || python=python3
venv="$root/.venv"
stamp="$venv/.tether-installed"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    "$venv/bin/python" -m pip install --quiet --upgrade pip >&2
    "$venv/bin/python" -m pip install --quiet -e ".[dev]" >&2
    echo "$want" > "$stamp"
fi
