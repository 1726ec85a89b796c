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
    echo "tether: creating $venv" >&2
    "$python" -m venv "$venv"
fi
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    started=$SECONDS
    echo "tether: installing tether and its dependencies into .venv (once; under a minute with a warm package cache)" >&2
    "$venv/bin/python" -m pip install --quiet --upgrade pip >&2
    # pip's own progress, one line per package it fetches; the whole log is kept.
    log="$venv/pip-install.log"
    set +o pipefail
    "$venv/bin/python" -m pip install --progress-bar off -e ".[dev,telemetry]" 2>&1 | tee "$log" \
        | { grep --line-buffered -E '^Collecting ' || true; } \
        | sed -u -E 's/^Collecting ([^ ]+).*/  fetching \1/' >&2
    status=${PIPESTATUS[0]}
    set -o pipefail
    if [ "$status" -ne 0 ]; then
        tail -n 20 "$log" >&2
        echo "tether: installing failed (exit $status); the whole log: $log" >&2
        exit "$status"
    fi
    echo "$want" > "$stamp"
    echo "tether: ready in $((SECONDS - started)) s" >&2
fi
