#!/bin/sh
# nats.js's own Deno test suites (core, jetstream, kv, obj) as a judge: run against nats-server, then against FlowMQ
# (a `nats-server` shim first in PATH that starts FlowMQ from the config file nats.js's test launcher writes), one
# suite at a time, and print passed/failed/ignored per suite and server, and the failing tests. Not part of npm
# test: the suites are nats.js's, not FlowMQ's, and are not kept here.
#
# Usage: run.sh <nats.js tree> <std tree> <nkeys.js tree> <nuid.js tree> <jwt.js tree>
#   nats.js tree: a release of github.com/nats-io/nats.js (`git archive v3.4.0`); copied, the copy's deno.json
#     files are rewritten (importmap.mjs) so that its jsr: imports are the local trees below (JSR need not be
#     reachable; npm: imports come from the npm registry).
#   std tree: github.com/denoland/std at the release matching nats.js's pins (`git archive release-2026.01.30`:
#     @std/assert 1.0.18, async 1.1.1, path 1.1.4, fmt 1.0.9, bytes 1.0.6; io 0.225.3 for 0.225.2).
#   nkeys.js (v2.0.3), nuid.js (v3.0.0), jwt.js (the commit whose deno.json says 0.0.11): the @nats-io/* JSR packages.
# Environment: SUITES (default "core jetstream kv obj"), SERVERS (default "nats-server flowmq"), NATSJS_TEST_TIMEOUT
#   (seconds a test may run, default 30: tests waiting for what a server never sends fail with "timed out"),
#   SUITE_TIMEOUT (seconds per suite run, default 1500), NATS_SERVER (default: nats-server on PATH, /usr/sbin),
#   OUT (directory kept for the logs and failure lists; default a temporary one, printed), FILES (test files of the
#   suite to run instead of all, relative to the nats.js tree, e.g. "kv/tests/kv_test.ts"; with one suite in SUITES).
# Deno is installed from npm (package `deno`) into a temporary directory. Needs a FlowMQ build (npm run build).
set -eu
usage="usage: run.sh <nats.js tree> <std tree> <nkeys.js tree> <nuid.js tree> <jwt.js tree>"
[ $# -eq 5 ] || { echo "$usage" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
SRC=$(cd "$1" && pwd)
shift
DEPS=""
for d in "$@"; do DEPS="$DEPS $(cd "$d" && pwd)"; done
SUITES=${SUITES:-core jetstream kv obj}
SERVERS=${SERVERS:-nats-server flowmq}
SUITE_TIMEOUT=${SUITE_TIMEOUT:-1500}
export NATSJS_TEST_TIMEOUT=${NATSJS_TEST_TIMEOUT:-30}
REAL=${NATS_SERVER:-$(PATH="$PATH:/usr/sbin" command -v nats-server)}
WORK=$(mktemp -d)
OUT=${OUT:-$WORK/out}
mkdir -p "$OUT"
# Everything but the logs (kept in $OUT, which may be inside $WORK) goes at the end.
trap 'rm -rf "$WORK/natsjs" "$WORK/deno" "$WORK/deno-dir" "$WORK/tmp" "$WORK/bin-nats-server" "$WORK/bin-flowmq" "$WORK/pgid"; rmdir "$WORK" 2>/dev/null || true' EXIT

cp -r "$SRC" "$WORK/natsjs"
# shellcheck disable=SC2086
node "$HERE/importmap.mjs" "$WORK/natsjs" $DEPS
(cd "$WORK" && mkdir deno && cd deno && npm install --no-audit --no-fund --loglevel=error deno >/dev/null)
DENO="$WORK/deno/node_modules/.bin/deno"
echo "deno: $("$DENO" --version | head -1); nats-server: $("$REAL" --version)"

# `nats-server` for each server under test: the real one, or the shim starting FlowMQ.
mkdir -p "$WORK/bin-nats-server" "$WORK/bin-flowmq"
ln -s "$REAL" "$WORK/bin-nats-server/nats-server"
ln -s "$HERE/nats-server-shim.sh" "$WORK/bin-flowmq/nats-server"
export FLOWMQ_ROOT="$ROOT"
export NO_COLOR=1 DENO_DIR="$WORK/deno-dir" DENO_NO_UPDATE_CHECK=1

for suite in $SUITES; do
  for server in $SERVERS; do
    label=$server
    [ "$server" = flowmq ] && label="FlowMQ $(git -C "$ROOT" rev-parse --short HEAD)"
    [ "$server" = nats-server ] && label="nats-server $("$REAL" --version | sed 's/.*v//')"
    log="$OUT/$server-$suite.log"
    # Own temporary directory per run (the launcher writes its config and ports files there); the run in its own
    # process group, so that servers left by a test cut off are stopped with it.
    mkdir -p "$WORK/tmp"
    # Test files that start no server (the client's buffers, parsers, encoders, sha256...) prove nothing about a
    # server and some are CPU-bound for a minute: left out on both (listed once, below the counts).
    ignore=$(cd "$WORK/natsjs" && for f in "$suite"/tests/*_test.ts; do grep -qE 'NatsServer|setup\(|connect\(' "$f" || printf '%s,' "$f"; done)
    export NATSJS_SHIM_LOG="$OUT/$server-$suite.shim.log"
    (cd "$WORK/natsjs" && TMPDIR="$WORK/tmp" PATH="$WORK/bin-$server:$PATH" setsid sh -c 'echo $$ >"$0"; exec timeout -s KILL "$1" "$2" test -A --no-check --preload "$3" ${5:+"--ignore=$5"} ${6:-"$4/tests/"}' \
      "$WORK/pgid" "$SUITE_TIMEOUT" "$DENO" "$HERE/timeout.js" "$suite" "${ignore%,}" "${FILES:-}" >"$log" 2>&1) || true
    kill -KILL -- "-$(cat "$WORK/pgid")" 2>/dev/null || true
    rm -rf "$WORK/tmp"
    node "$HERE/report.mjs" "$suite on $label" "$log" "$OUT/$server-$suite.failures"
    [ -z "$ignore" ] || echo "   (left out, no server: $(echo "${ignore%,}" | sed "s|$suite/tests/||g; s|,|, |g"))"
  done
done
echo "logs and failure lists: $OUT"
