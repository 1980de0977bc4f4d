#!/usr/bin/env bash
# Checks docker-compose.yml with `docker compose config` (no Docker engine needed): its syntax, that it
# refuses to start without its secrets, that it publishes only loopback ports and no admin API, that
# each service has its own database role, and that Temporal runs with the files in temporal/.
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
secrets=(APP_DB_PASSWORD APP_ROLE_PASSWORD PROVIDER_ROLE_PASSWORD READER_ROLE_PASSWORD TEMPORAL_DB_PASSWORD PROVIDER_API_KEY PROVIDER_ADMIN_KEY PAYLOAD_KEYS CODEC_SERVER_TOKEN)
unset_all=()
for v in "${secrets[@]}" PROVIDER_ADMIN_HOST; do unset_all+=(-u "$v"); done

# 1. No secret has a default: without them, compose refuses, naming what to set.
if out=$(env "${unset_all[@]}" "${compose[@]}" --env-file /dev/null -f docker-compose.yml config -q 2>&1); then
  echo "check-compose: docker compose accepted the file without its secrets" >&2; exit 1
fi
grep -q "in .env (see .env.example)" <<<"$out" || { echo "check-compose: unexpected refusal: $out" >&2; exit 1; }
if grep -n "dev-only" docker-compose.yml; then echo "check-compose: a development default is in docker-compose.yml" >&2; exit 1; fi
# The image is built from the checkout (COPY . .): the secrets in .env must never go into it.
grep -qx '.env' .dockerignore || { echo "check-compose: .dockerignore does not exclude .env (the build would copy the secrets into the image)" >&2; exit 1; }

# 2. With them (throwaway values, never written to the repository): valid, and what it publishes is
#    loopback only, without the provider's admin API, which listens on the provider's own loopback.
envfile=$(mktemp)
trap 'rm -f "$envfile"' EXIT
for v in "${secrets[@]}"; do echo "$v=check-$v-$RANDOM$RANDOM" >>"$envfile"; done
env "${unset_all[@]}" "${compose[@]}" --env-file "$envfile" -f docker-compose.yml config -q
env "${unset_all[@]}" "${compose[@]}" --env-file "$envfile" -f docker-compose.yml config --format json | node -e '
  const cfg = JSON.parse(require("fs").readFileSync(0, "utf8"));
  const bad = [];
  for (const [name, svc] of Object.entries(cfg.services)) {
    for (const p of svc.ports ?? []) {
      if (p.host_ip !== "127.0.0.1") bad.push(`${name}: port ${p.target} published on ${p.host_ip || "every interface"}`);
      if (String(p.target) === "4011" || String(p.published) === "4011") bad.push(`${name}: the admin API (4011) is published`);
    }
  }
  if (cfg.services.provider.environment.PROVIDER_ADMIN_HOST !== "127.0.0.1") bad.push("provider: the admin API does not listen on loopback only");
  // Each process connects with its own role; only setup (the migrations) as the owner.
  const roles = { setup: "orders", provider: "order_provider", worker: "order_app", api: "order_app" };
  for (const [name, svc] of Object.entries(cfg.services)) {
    const url = svc.environment?.DATABASE_URL;
    if (url === undefined) continue;
    const user = new URL(url).username;
    if (roles[name] !== user) bad.push(`${name}: connects as ${user}, not ${roles[name] ?? "(no database)"}`);
  }
  if (new URL(cfg.services.worker.environment.READER_DATABASE_URL ?? "postgres://none@x/").username !== "order_reader") bad.push("worker: reconciliation does not read as order_reader");
  // Temporal runs with the configuration files npm start -- --temporal server and test:server use.
  const mounts = (svc, source, target) => (svc.volumes ?? []).some((v) => v.source.endsWith(source) && v.target === target);
  if (!mounts(cfg.services.temporal, "/temporal", "/etc/order-saga/temporal")) bad.push("temporal: does not mount ./temporal");
  if (!String(cfg.services.temporal.command).includes("--config temporal/config --env order-saga")) bad.push("temporal: does not start with temporal/config (env order-saga)");
  if (!mounts(cfg.services["temporal-ui"], "/temporal/ui/order-saga.yaml", "/home/ui-server/config/order-saga.yaml")) bad.push("temporal-ui: does not mount temporal/ui/order-saga.yaml");
  if (!(cfg.services["temporal-ui"].entrypoint ?? []).join(" ").includes("--env order-saga")) bad.push("temporal-ui: does not use temporal/ui/order-saga.yaml");
  // Payloads are sealed by every app process, and the Web UI decodes through the codec server.
  for (const name of ["worker", "codec-server", "api"])
    if (!cfg.services[name]?.environment?.PAYLOAD_KEYS) bad.push(`${name}: no PAYLOAD_KEYS`);
  for (const name of ["provider", "setup", "temporal", "temporal-ui"])
    if (cfg.services[name]?.environment?.PAYLOAD_KEYS) bad.push(`${name}: has the payload keys, which it does not need`);
  const codecEndpoint = cfg.services["temporal-ui"].environment?.TEMPORAL_CODEC_ENDPOINT ?? "";
  if (!codecEndpoint.startsWith("http://127.0.0.1:8234/") || codecEndpoint.endsWith("/")) bad.push("temporal-ui: no codec endpoint with its token");
  if (!(cfg.services["codec-server"]?.environment?.CODEC_SERVER_ORIGINS ?? "").split(",").includes("http://127.0.0.1:8233")) bad.push("codec-server: the Web UI origin is not the one allowed");
  if (bad.length) { console.error("check-compose: " + bad.join("; ")); process.exit(1); }
'
echo "docker-compose.yml: config -q passed; refused without its secrets; every published port on 127.0.0.1; admin API not published, on the provider's loopback; each process with its own database role; Temporal and its Web UI configured by temporal/; payloads sealed, the Web UI decoding through the codec server"
