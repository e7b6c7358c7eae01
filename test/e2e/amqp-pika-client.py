"""pika (Debian's python3-pika) against FlowMQ's AMQP listener: run by amqp-pika.test.ts, prints one JSON line."""
import json
import sys

import pika

port = int(sys.argv[1])
out = {}
conn = pika.BlockingConnection(pika.ConnectionParameters(host='127.0.0.1', port=port, heartbeat=10))
ch = conn.channel()
ch.confirm_delivery()
ch.exchange_declare('pika-x', 'topic', durable=True)
q = ch.queue_declare('', exclusive=True).method.queue
ch.queue_bind(q, 'pika-x', 'a.#')
ch.basic_qos(prefetch_count=10)
props = pika.BasicProperties(content_type='text/plain', headers={'i': 1, 's': 'str', 'l': [1, 'a'], 'd': {'x': 1}},
                             delivery_mode=2, correlation_id='c', reply_to='r.q', message_id='m', type='t', app_id='app')
for i in range(50):
    ch.basic_publish('pika-x', 'a.b.%d' % i, b'body %d' % i, props)
try:
    ch.basic_publish('pika-x', 'nomatch', b'x', mandatory=True)
    out['unroutable'] = 'published'
except pika.exceptions.UnroutableError:
    out['unroutable'] = 'returned'
got = []
for method, p, body in ch.consume(q, inactivity_timeout=10):
    if method is None:
        break
    got.append({'body': body.decode(), 'rk': method.routing_key, 'headers': p.headers, 'cid': p.correlation_id,
                'reply_to': p.reply_to, 'mode': p.delivery_mode})
    ch.basic_ack(method.delivery_tag)
    if len(got) == 50:
        break
ch.cancel()
out['consumed'] = len(got)
out['first'] = got[0] if got else None
ch2 = conn.channel()
ch2.tx_select()
ch2.basic_publish('', q, b'tx1')
ch2.tx_commit()
m = ch2.basic_get(q, auto_ack=True)
out['tx'] = m[2].decode() if m[2] is not None else None
try:
    ch2.queue_declare('nope', passive=True)
except pika.exceptions.ChannelClosedByBroker as e:
    out['passive'] = e.reply_code
conn.close()
print(json.dumps(out))
