#!/usr/bin/env bash
# Checks docker-compose.yml's syntax with `docker compose config -q` (no Docker engine needed).
# Uses the installed Compose plugin, else builds Compose from the Go module proxy into the cache.
set -euo pipefail
cd "$(dirname "$0")/.."
COMPOSE_VERSION="${COMPOSE_VERSION:-v2.29.7}"
CACHE="${ORDER_SAGA_CACHE:-$HOME/.cache/order-saga}"
bin="$CACHE/bin/docker-compose-$COMPOSE_VERSION"
if docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
elif command -v docker-compose >/dev/null 2>&1 && docker-compose version 2>/dev/null | grep -q 'v2\.'; then
  compose=(docker-compose)
else
  if [[ ! -x "$bin" ]]; then
    command -v go >/dev/null 2>&1 || { echo "check-compose: neither Docker Compose nor Go is available" >&2; exit 1; }
    echo "[compose] building Docker Compose $COMPOSE_VERSION with go install (first run only)..." >&2
    tmpbin="$(mktemp -d)"
    GOBIN="$tmpbin" go install "github.com/docker/compose/v2/cmd@$COMPOSE_VERSION"
    mkdir -p "$CACHE/bin" && mv "$tmpbin/cmd" "$bin" && rmdir "$tmpbin"
  fi
  compose=("$bin")
fi
"${compose[@]}" -f docker-compose.yml config -q
echo "docker-compose.yml: docker compose config -q passed"
