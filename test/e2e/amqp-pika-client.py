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
# basic.recover with requeue=false: the unacked deliveries come again to the same consumer, redelivered, under new
# delivery tags (AMQP 0-9-1 1.8.3.16), never to another consumer of the queue (requeue=true would share them out); a
# basic.get delivery has no recipient to go back to and returns to its queue.
import time


def pump(until, seconds=10):
    deadline = time.time() + seconds
    while not until() and time.time() < deadline:
        conn.process_data_events(time_limit=0.2)


ch3 = conn.channel()
ch3.basic_qos(prefetch_count=3)
ch4 = conn.channel()
q3 = ch3.queue_declare('', exclusive=True).method.queue
got3 = []
got4 = []
ctag = ch3.basic_consume(q3, lambda c, m, p, b: got3.append((m.consumer_tag, m.delivery_tag, m.redelivered, b.decode())))
for i in range(3):
    ch3.basic_publish('', q3, b'r%d' % i)
pump(lambda: len(got3) >= 3)


def on4(c, m, p, b):
    got4.append(b.decode())
    c.basic_ack(m.delivery_tag)


ch4.basic_consume(q3, on4)
ch3.basic_recover(requeue=False)
pump(lambda: len(got3) >= 6)
for (_, tag, _, _) in got3[3:]:
    ch3.basic_ack(tag)
ch3.basic_cancel(ctag)
ch3.basic_publish('', q3, b'marker')
pump(lambda: 'marker' in got4)
ch4.close()
out['recover_first'] = got3[:3]
out['recover_again'] = got3[3:]
out['recover_other'] = got4
ch3.basic_publish('', q3, b'g')
g1 = ch3.basic_get(q3)
ch3.basic_recover(requeue=False)
g2 = ch3.basic_get(q3)
out['recover_get'] = [g1[2].decode(), g1[0].redelivered, g2[2].decode() if g2[2] is not None else None, g2[0].redelivered if g2[0] else None]
ch3.basic_ack(g2[0].delivery_tag)
conn.close()
print(json.dumps(out))
