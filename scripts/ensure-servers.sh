#!/usr/bin/env bash
# Obtain the two real Temporal servers the project runs against, from package registries only:
#   - the Temporal CLI (dev server + Web UI), built with `go install`;
#   - the Java time-skipping test server, resolved with Maven and started by an `exec java` wrapper;
#   - only with `server`: the real Temporal server (for Postgres), its SQL schema tool, and the
#     standalone Web UI server, each built with `go install` (npm start -- --temporal=server, test:server).
# Both are cached under ${ORDER_SAGA_CACHE:-~/.cache/order-saga} so a fresh clone finds them again.
# Paths given in TEMPORAL_CLI_PATH / TEMPORAL_TEST_SERVER_PATH win. When Go or Java/Maven is missing,
# the step is skipped and the SDK falls back to its own download (needs internet).
set -euo pipefail

CLI_VERSION="${TEMPORAL_CLI_VERSION:-v1.5.1}"
TEST_SERVER_VERSION="${TEMPORAL_TEST_SERVER_VERSION:-1.34.0}"
CACHE="${ORDER_SAGA_CACHE:-$HOME/.cache/order-saga}"
# Fixed (servers/temporal-server.ts names the same): the server and the Web UI inside the CLI v1.5.1.
SERVER_VERSION="v1.29.1"
UI_VERSION="v2.42.1"
WHAT="${1:-all}"   # all | cli | test-server | server
mkdir -p "$CACHE/bin"

say() { printf '[servers] %s\n' "$*" >&2; }

# Builds `module@version`'s binary `name` once into the cache as `target` (go install, own GOBIN).
go_build() {
  local what="$1" module="$2" name="$3" target="$4"
  if [[ -x "$target" ]]; then say "$what: cached at $target"; return 0; fi
  command -v go >/dev/null 2>&1 || { say "$what: go not found; cannot build it"; return 1; }
  say "$what: building with go install $module (first run only, a few minutes)..."
  local tmpbin; tmpbin="$(mktemp -d)"
  GOBIN="$tmpbin" GOFLAGS="${GOFLAGS:-} -trimpath" go install "$module"
  mv "$tmpbin/$name" "$target"
  rm -rf "$tmpbin"
  say "$what: built at $target"
}

# ---- the real Temporal server, its SQL tool, the Web UI server (only when asked) -----------
if [[ "$WHAT" == server ]]; then
  go_build "Temporal server $SERVER_VERSION" "go.temporal.io/server/cmd/server@$SERVER_VERSION" server "$CACHE/bin/temporal-server-$SERVER_VERSION"
  go_build "Temporal SQL tool $SERVER_VERSION" "go.temporal.io/server/cmd/tools/sql@$SERVER_VERSION" sql "$CACHE/bin/temporal-sql-tool-$SERVER_VERSION"
  go_build "Temporal UI server $UI_VERSION" "github.com/temporalio/ui-server/v2/cmd/server@$UI_VERSION" server "$CACHE/bin/temporal-ui-server-$UI_VERSION"
  # The SQL schema the tool applies ships in the server module; keep a copy beside the binaries.
  schema="$CACHE/temporal-schema-$SERVER_VERSION"
  if [[ ! -f "$schema/.complete" ]]; then
    moddir="$(go env GOMODCACHE)/go.temporal.io/server@$SERVER_VERSION"
    [[ -d "$moddir/schema/postgresql" ]] || go mod download -x "go.temporal.io/server@$SERVER_VERSION" >/dev/null 2>&1 || true
    rm -rf "$schema" && mkdir -p "$schema"
    cp -r "$moddir/schema/postgresql" "$schema/" && chmod -R u+w "$schema"
    touch "$schema/.complete"
  fi
  say "Temporal schema $SERVER_VERSION: $schema"
  exit 0
fi

# ---- Temporal CLI -------------------------------------------------------------------------
cli="$CACHE/bin/temporal-$CLI_VERSION"
if [[ "$WHAT" == test-server ]]; then
  :
elif [[ -n "${TEMPORAL_CLI_PATH:-}" ]]; then
  say "Temporal CLI: using TEMPORAL_CLI_PATH=$TEMPORAL_CLI_PATH"
elif [[ -x "$cli" ]]; then
  say "Temporal CLI $CLI_VERSION: cached at $cli"
elif command -v go >/dev/null 2>&1; then
  say "Temporal CLI $CLI_VERSION: building with go install (first run only, a few minutes)..."
  tmpbin="$(mktemp -d)"
  GOBIN="$tmpbin" GOFLAGS="${GOFLAGS:-} -trimpath" go install "github.com/temporalio/cli/cmd/temporal@$CLI_VERSION"
  mv "$tmpbin/temporal" "$cli"
  rmdir "$tmpbin"
  say "Temporal CLI $CLI_VERSION: built at $cli"
else
  say "Temporal CLI: go not found; the SDK will try to download its dev server"
fi
[[ -x "$cli" ]] && ln -sf "$cli" "$CACHE/bin/temporal"

# ---- Java time-skipping test server -------------------------------------------------------
ts_dir="$CACHE/test-server-$TEST_SERVER_VERSION"
wrapper="$CACHE/bin/temporal-test-server"
if [[ "$WHAT" == cli ]]; then
  exit 0
elif [[ -n "${TEMPORAL_TEST_SERVER_PATH:-}" ]]; then
  say "Time-skipping server: using TEMPORAL_TEST_SERVER_PATH=$TEMPORAL_TEST_SERVER_PATH"
elif [[ -f "$ts_dir/.complete" ]]; then
  say "Time-skipping server $TEST_SERVER_VERSION: cached at $ts_dir"
elif command -v mvn >/dev/null 2>&1 && command -v java >/dev/null 2>&1; then
  say "Time-skipping server $TEST_SERVER_VERSION: resolving io.temporal:temporal-test-server with Maven..."
  rm -rf "$ts_dir" && mkdir -p "$ts_dir"
  cat > "$ts_dir/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.order-saga</groupId>
  <artifactId>test-server-classpath</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>io.temporal</groupId>
      <artifactId>temporal-test-server</artifactId>
      <version>$TEST_SERVER_VERSION</version>
    </dependency>
  </dependencies>
</project>
POM
  mvn -B -q -f "$ts_dir/pom.xml" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$ts_dir/lib"
  # Class-data sharing archive: cuts the JVM's start so the SDK's readiness wait is met comfortably.
  if java -XX:ArchiveClassesAtExit="$ts_dir/app.jsa" -cp "$ts_dir/lib/*" io.temporal.testserver.TestServer 0 \
       >/dev/null 2>&1 & pid=$!; then
    sleep 8; kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
  fi
  touch "$ts_dir/.complete"
  say "Time-skipping server $TEST_SERVER_VERSION: ready at $ts_dir"
else
  say "Time-skipping server: java/mvn not found; the SDK will try to download its test server"
fi
if [[ -f "$ts_dir/.complete" ]]; then
  cds=""
  [[ -f "$ts_dir/app.jsa" ]] && cds="-XX:SharedArchiveFile=$ts_dir/app.jsa -Xshare:auto"
  cat > "$wrapper.tmp" <<WRAP
#!/usr/bin/env bash
# Generated by scripts/ensure-servers.sh. exec matters: the SDK stops this process with SIGKILL.
exec java $cds -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xss512k -cp "$ts_dir/lib/*" io.temporal.testserver.TestServer "\$@"
WRAP
  chmod +x "$wrapper.tmp" && mv "$wrapper.tmp" "$wrapper"
fi
