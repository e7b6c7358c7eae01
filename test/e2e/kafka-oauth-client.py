"""
Debian's python3-confluent-kafka (librdkafka 2.0.2) with SASL OAUTHBEARER and an oauth_cb, driven by
test/e2e/oidc.test.ts against a real FlowMQ broker. The test signs the tokens (with its own key, served by its own
JWKS endpoint) and hands them in on stdin as JSON {"tokens": [[jwt, exp_seconds], ...]}: oauth_cb returns them in
turn (the last one again once they run out). Every step prints one JSON line.

  roundtrip BOOTSTRAP TOPIC GROUP   produce a record and read it back with a consumer group
  refused BOOTSTRAP TOPIC           produce with a token the broker refuses: print the errors librdkafka reports
  expire BOOTSTRAP TOPIC SECONDS    produce, wait SECONDS (past the first token's expiry: librdkafka 2.0.2 does not
                                    re-authenticate, KIP-368 came in 2.2, so the broker closes the connection and
                                    librdkafka reconnects with the next token), produce again
"""
import json
import sys
import time

from confluent_kafka import Consumer, Producer

tokens = json.loads(sys.stdin.read())['tokens']
calls = [0]


def oauth_cb(_config):
    i = min(calls[0], len(tokens) - 1)
    calls[0] += 1
    jwt, exp = tokens[i]
    return jwt, float(exp)


def out(**kw):
    print(json.dumps(kw), flush=True)


def common(bootstrap, errors):
    return {
        'bootstrap.servers': bootstrap,
        'security.protocol': 'SASL_PLAINTEXT',
        'sasl.mechanisms': 'OAUTHBEARER',
        'oauth_cb': oauth_cb,
        'error_cb': lambda e: errors.append(str(e)),
        'reconnect.backoff.ms': 100,
        'reconnect.backoff.max.ms': 500,
    }


def produce(p, topic, value, timeout=10):
    result = {}

    def done(err, msg):
        result['err'] = None if err is None else str(err)
        result['offset'] = None if msg is None else msg.offset()

    p.produce(topic, value=value.encode(), on_delivery=done)
    p.flush(timeout)
    return result


def roundtrip(bootstrap, topic, group):
    errors = []
    p = Producer({**common(bootstrap, errors), 'acks': 'all'})
    out(step='produced', **produce(p, topic, 'from-librdkafka'))
    c = Consumer({**common(bootstrap, errors), 'group.id': group, 'auto.offset.reset': 'earliest'})
    c.subscribe([topic])
    value = None
    deadline = time.time() + 15
    while value is None and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            value = m.value().decode()
    c.close()
    out(step='read', value=value, calls=calls[0], errors=errors)


def refused(bootstrap, topic):
    errors = []
    p = Producer({**common(bootstrap, errors), 'message.timeout.ms': 2000})
    r = produce(p, topic, 'never', timeout=4)
    out(step='refused', delivery=r.get('err'), errors=errors)


def expire(bootstrap, topic, seconds):
    errors = []
    p = Producer({**common(bootstrap, errors), 'acks': 'all'})
    first = produce(p, topic, 'before-expiry')
    deadline = time.time() + seconds
    while time.time() < deadline:
        p.poll(0.2)
    second = produce(p, topic, 'after-expiry')
    out(step='expire', first=first, second=second, calls=calls[0], errors=errors)


if __name__ == '__main__':
    cmd = sys.argv[1]
    if cmd == 'roundtrip':
        roundtrip(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == 'refused':
        refused(sys.argv[2], sys.argv[3])
    elif cmd == 'expire':
        expire(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    else:
        sys.exit('unknown command ' + cmd)
