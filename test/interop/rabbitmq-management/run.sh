#!/bin/sh
# Side by side: RabbitMQ (Debian's rabbitmq-server with its rabbitmq_management plugin) and FlowMQ, on private
# ports, the same objects made on both with amqplib, then compare.mjs on every endpoint. Not part of npm test.
# Needs: apt-get install -y rabbitmq-server; a FlowMQ build (npm run build). Prints the differences.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
WORK=$(mktemp -d)
RPORT=${RPORT:-25680} RMGMT=${RMGMT:-25681} FPORT=${FPORT:-25672} FMGMT=${FMGMT:-25673}
echo '[rabbitmq_management].' > "$WORK/enabled_plugins"
printf 'listeners.tcp.default = %s\nmanagement.tcp.port = %s\nloopback_users = none\n' "$RPORT" "$RMGMT" > "$WORK/rabbitmq.conf"
env RABBITMQ_NODENAME=rmqcmp@localhost RABBITMQ_MNESIA_BASE="$WORK/mnesia" RABBITMQ_LOG_BASE="$WORK/log" \
  RABBITMQ_ENABLED_PLUGINS_FILE="$WORK/enabled_plugins" RABBITMQ_CONFIG_FILE="$WORK/rabbitmq" RABBITMQ_DIST_PORT=25682 \
  HOME="$WORK" /usr/lib/rabbitmq/bin/rabbitmq-server > "$WORK/rabbitmq.log" 2>&1 &
RPID=$!
# guest/guest as RabbitMQ's administrator: the users, permissions and policies calls end FlowMQ's no-user bootstrap.
# Vhost cmp-v (compare.mjs's per-vhost permissions): a FlowMQ namespace, made on RabbitMQ below.
printf 'users:\n  - {username: guest, password: guest, groups: [admins]}\nnamespaces:\n  - {name: cmp-v}\n' > "$WORK/flowmq-users.yaml"
"$ROOT/bin/flowmq" start --data-dir "$WORK/flowmq" --users-file "$WORK/flowmq-users.yaml" --host 127.0.0.1 --mqtt-port 0 --mqtt-ws-port 0 --kafka-port 0 \
  --nats-port 0 --http-port 0 --amqp-port "$FPORT" --amqp-management-port "$FMGMT" > "$WORK/flowmq.log" 2>&1 &
FPID=$!
trap 'kill $FPID 2>/dev/null; /usr/lib/rabbitmq/bin/rabbitmqctl -n rmqcmp@localhost stop >/dev/null 2>&1 || kill $RPID; rm -rf "$WORK"' EXIT
for _ in $(seq 60); do
  curl -sf -u guest:guest "http://localhost:$RMGMT/api/overview" >/dev/null && curl -s -o /dev/null "http://localhost:$FMGMT/" && break
  sleep 1
done
curl -sf -u guest:guest -X PUT "http://localhost:$RMGMT/api/vhosts/cmp-v" >/dev/null
cd "$HERE" && [ -e node_modules ] || ln -s "$ROOT/node_modules" "$HERE/node_modules"
node "$HERE/compare.mjs" "http://guest:guest@localhost:$RMGMT" "amqp://guest:guest@localhost:$RPORT" \
  "http://guest:guest@localhost:$FMGMT" "amqp://guest:guest@localhost:$FPORT"
