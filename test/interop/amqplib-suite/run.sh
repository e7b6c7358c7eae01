#!/bin/sh
# amqplib's own test suite as a judge: run against RabbitMQ (Debian's rabbitmq-server) and against FlowMQ, one
# after the other on port 5672 (a few of its tests connect to amqp://localhost:5672 whatever URL says), and print
# each summary and the failing tests. Not part of npm test: the suite is amqplib's, not FlowMQ's, and is not kept
# here. Usage: run.sh <amqplib source tree> (a checkout of an amqplib release, e.g. `git archive v0.10.9` of
# github.com/amqp-node/amqplib; its dev dependencies are installed into it with npm). Needs rabbitmq-server and a
# FlowMQ build (npm run build); port 5672 must be free.
set -eu
SRC=$(cd "${1:?usage: run.sh <amqplib source tree>}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
WORK=$(mktemp -d)
[ -x "$SRC/node_modules/.bin/mocha" ] || (cd "$SRC" && npm install --no-audit --no-fund >/dev/null)
suite() { # $1: label
  (cd "$SRC" && URL=amqp://guest:guest@localhost:5672 timeout 900 ./node_modules/.bin/mocha --check-leaks -u tdd --exit -R dot test/ >"$WORK/$1.txt" 2>&1) || true
  echo "== $1: $(grep -E '^ +[0-9]+ (passing|failing|pending)' "$WORK/$1.txt" | tr -s ' ' | tr '\n' ' ')"
  grep -E '^ +[0-9]+\) ' -A1 "$WORK/$1.txt" | grep -vE '^--$' | paste - - | sed 's/^ *//' || true
}
open5672() { node -e "require('net').connect(5672,'127.0.0.1').on('connect',()=>process.exit(0)).on('error',()=>process.exit(1))"; }
wait_port() { for _ in $(seq 240); do open5672 && return 0; sleep 0.5; done; echo "port 5672 never opened" >&2; return 1; }

printf 'listeners.tcp.default = 5672\nloopback_users = none\n' >"$WORK/rabbitmq.conf"
echo '[].' >"$WORK/enabled_plugins"
env RABBITMQ_NODENAME=amqplibsuite@localhost RABBITMQ_MNESIA_BASE="$WORK/mnesia" RABBITMQ_LOG_BASE="$WORK/log" \
  RABBITMQ_ENABLED_PLUGINS_FILE="$WORK/enabled_plugins" RABBITMQ_CONFIG_FILE="$WORK/rabbitmq" RABBITMQ_DIST_PORT=25692 \
  HOME="$WORK" /usr/lib/rabbitmq/bin/rabbitmq-server >"$WORK/rabbitmq.log" 2>&1 &
RPID=$!
trap 'kill $RPID 2>/dev/null || true; [ -n "${FPID:-}" ] && kill $FPID 2>/dev/null; rm -rf "$WORK"' EXIT
wait_port
sleep 2
suite "RabbitMQ $(dpkg-query -W -f='${Version}' rabbitmq-server 2>/dev/null || echo)"
HOME="$WORK" /usr/lib/rabbitmq/bin/rabbitmqctl -n amqplibsuite@localhost stop >/dev/null 2>&1 || kill $RPID
while open5672; do sleep 0.5; done

"$ROOT/bin/flowmq" start --data-dir "$WORK/flowmq" --protocols amqp --amqp-port 5672 --mqtt-port 0 --mqtt-ws false \
  --kafka-port 0 --nats-port 0 --http-port 0 --log-level warn >"$WORK/flowmq.log" 2>&1 &
FPID=$!
wait_port
suite "FlowMQ $(git -C "$ROOT" rev-parse --short HEAD)"
