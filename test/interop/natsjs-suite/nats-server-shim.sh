#!/bin/sh
# `nats-server -c <config>` for nats.js's test launcher, run as FlowMQ: shim-conf.mjs turns the config file into
# `flowmq start` arguments (and writes the ports file the launcher reads, named by this process id), then this
# process becomes FlowMQ (exec: same pid, so the launcher's signals reach the broker). FLOWMQ_ROOT: the checkout.
set -eu
HERE=$(dirname "$(readlink -f "$0")")
[ "${1:-}" = "-c" ] && [ -n "${2:-}" ] || { echo "flowmq shim: usage: nats-server -c <config file>" >&2; exit 2; }
args=$(node "$HERE/shim-conf.mjs" "$2" $$) || exit 1
IFS='
'
# shellcheck disable=SC2086
set -- $args
exec "$FLOWMQ_ROOT/bin/flowmq" "$@"
