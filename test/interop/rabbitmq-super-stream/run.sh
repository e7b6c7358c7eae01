#!/bin/bash
# Side by side: a super stream declared by hand with pika (test/e2e/amqp-super-stream-pika.py) on RabbitMQ (Debian's
# rabbitmq-server) and on FlowMQ, on private ports; prints each broker's answers and their differences. Not part of
# npm test. Needs: apt-get install -y rabbitmq-server python3-pika; a FlowMQ build (npm run build).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
WORK=$(mktemp -d)
RPORT=${RPORT:-25690} FPORT=${FPORT:-25691}
printf 'listeners.tcp.default = %s\nloopback_users = none\n' "$RPORT" > "$WORK/rabbitmq.conf"
echo '[].' > "$WORK/enabled_plugins"
env RABBITMQ_NODENAME=rmqss@localhost RABBITMQ_MNESIA_BASE="$WORK/mnesia" RABBITMQ_LOG_BASE="$WORK/log" \
  RABBITMQ_ENABLED_PLUGINS_FILE="$WORK/enabled_plugins" RABBITMQ_CONFIG_FILE="$WORK/rabbitmq" RABBITMQ_DIST_PORT=25692 \
  HOME="$WORK" /usr/lib/rabbitmq/bin/rabbitmq-server > "$WORK/rabbitmq.log" 2>&1 &
RPID=$!
"$ROOT/bin/flowmq" start --data-dir "$WORK/flowmq" --host 127.0.0.1 --mqtt-port 0 --mqtt-ws-port 0 --kafka-port 0 \
  --nats-port 0 --http-port 0 --amqp-port "$FPORT" > "$WORK/flowmq.log" 2>&1 &
FPID=$!
trap 'kill $FPID 2>/dev/null; HOME="$WORK" /usr/lib/rabbitmq/bin/rabbitmqctl -n rmqss@localhost stop >/dev/null 2>&1 || kill $RPID; rm -rf "$WORK"' EXIT
for _ in $(seq 90); do
  if (echo > /dev/tcp/127.0.0.1/$RPORT) 2>/dev/null && (echo > /dev/tcp/127.0.0.1/$FPORT) 2>/dev/null; then break; fi
  sleep 1
done
sleep 2
PY=/usr/bin/python3
R=$($PY "$ROOT/test/e2e/amqp-super-stream-pika.py" "$RPORT" ss)
F=$($PY "$ROOT/test/e2e/amqp-super-stream-pika.py" "$FPORT" ss)
echo "rabbitmq: $R"
echo "flowmq:   $F"
$PY - "$R" "$F" <<'PYEOF'
import json, sys
r, f = json.loads(sys.argv[1]), json.loads(sys.argv[2])
diff = [k for k in sorted(set(r) | set(f)) if r.get(k) != f.get(k)]
for k in diff:
    print('differs: %s rabbitmq=%s flowmq=%s' % (k, json.dumps(r.get(k)), json.dumps(f.get(k))))
print('%d of %d answers differ' % (len(diff), len(set(r) | set(f))))
PYEOF
