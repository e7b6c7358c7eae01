"""
pika (Debian's python3-pika 1.2, RabbitMQ's own Python client, written apart from amqplib) driven by
test/e2e/pika.test.ts against a real FlowMQ broker. Every step prints one JSON line for the test to check; the
client does the protocol work, the test decides what is right.

  workqueue PORT QUEUE N     3 competing consumers (one connection each) with prefetch 2 on a queue of N
                             persistent messages: first they hold what they get, then ack everything
  routing PORT               fanout, topic and headers exchanges; every content property and header type
  confirms PORT              publisher confirms: acks, basic.return of a mandatory unroutable publish, a nack
                             from a queue at its limit (x-overflow reject-publish)
  get PORT                   basic.get on an empty and a full queue, nack with requeue, reject without
  channel-error PORT         a 404 closes the channel only; the connection goes on with new channels
  publish PORT QUEUE N       declares a durable queue and publishes N persistent messages with confirms,
                             printing each confirmed one (the test kills the broker while this runs)
  drain PORT QUEUE           basic.get until get-empty: every body, with its redelivered flag
"""
import datetime
import decimal
import json
import sys
import time

import pika
import pika.exceptions

DEADLINE_S = 20  # a safety net for the loops below, never a wait for something not to happen


def out(**kw):
    print(json.dumps(kw), flush=True)


def connect(port):
    params = pika.ConnectionParameters(host='127.0.0.1', port=int(port), credentials=pika.PlainCredentials('guest', 'guest'))
    return pika.BlockingConnection(params)


def until(cond, conns, what):
    """Runs the connections' I/O until cond() holds (or fails after the safety net)."""
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError('timed out waiting for ' + what)
        for c in conns:
            c.process_data_events(time_limit=0.01)


def get_until(ch, queue, marker):
    """basic.get (auto ack) until the marker body; returns the bodies before it. The marker proves nothing else came."""
    bodies = []
    deadline = time.monotonic() + DEADLINE_S
    while True:
        method, _props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            if time.monotonic() > deadline:
                raise RuntimeError('no marker in ' + queue + ' after ' + json.dumps(bodies))
            ch.connection.process_data_events(time_limit=0.01)
            continue
        if body.decode() == marker:
            return bodies
        bodies.append(body.decode())


def workqueue(port, queue, n):
    n = int(n)
    prod = connect(port)
    pch = prod.channel()
    pch.queue_declare(queue, durable=True)
    pch.queue_purge(queue)
    pch.confirm_delivery()
    for i in range(n):
        pch.basic_publish('', queue, ('m%d' % i).encode(), pika.BasicProperties(delivery_mode=2))
    out(step='published', ready=pch.queue_declare(queue, passive=True).method.message_count)

    conns = [connect(port) for _ in range(3)]
    consumers = []
    for i, c in enumerate(conns):
        ch = c.channel()
        ch.basic_qos(prefetch_count=2)
        st = {'held': [], 'got': [], 'ack': False, 'ch': ch}

        def on_message(ch, method, props, body, st=st):
            st['got'].append({'body': body.decode(), 'redelivered': method.redelivered})
            if st['ack']:
                ch.basic_ack(method.delivery_tag)
            else:
                st['held'].append(method.delivery_tag)

        ch.basic_consume(queue, on_message, auto_ack=False, consumer_tag='pk-c%d' % i)
        consumers.append(st)

    # Hold everything: with prefetch 2 each consumer gets two messages and the broker keeps the rest.
    until(lambda: sum(len(s['held']) for s in consumers) >= 6, conns, 'six held messages')
    ready = pch.queue_declare(queue, passive=True).method.message_count
    out(step='held', counts=[len(s['held']) for s in consumers], ready=ready)

    # Then ack what is held and everything that comes, until all N have been consumed.
    for s in consumers:
        s['ack'] = True
        for tag in s['held']:
            s['ch'].basic_ack(tag)
        s['held'] = []
    until(lambda: sum(len(s['got']) for s in consumers) >= n, conns, 'all messages consumed')
    out(step='consumed', consumers=[s['got'] for s in consumers])
    for c in conns:
        c.close()

    # Marker: had any ack been lost, closing the consumers would have requeued that message ahead of the marker.
    pch.basic_publish('', queue, b'marker', pika.BasicProperties(delivery_mode=2))
    method, _p, body = pch.basic_get(queue, auto_ack=True)
    out(step='after', body=body.decode() if body is not None else None, redelivered=method.redelivered if method else None,
        remaining=method.message_count if method else None)
    pch.queue_delete(queue)
    prod.close()


def routing(port):
    c = connect(port)
    ch = c.channel()
    ch.confirm_delivery()

    # fanout: every bound queue; the routing key is ignored
    ch.exchange_declare('pk.fan', exchange_type='fanout')
    fan = []
    for _ in range(3):
        q = ch.queue_declare('', exclusive=True).method.queue
        ch.queue_bind(q, 'pk.fan', routing_key='whatever')
        fan.append(q)
    ch.basic_publish('pk.fan', 'k1', b'f1')
    ch.basic_publish('pk.fan', '', b'f2')
    ch.basic_publish('pk.fan', 'x', b'end')
    out(step='fanout', names=fan, queues=[get_until(ch, q, 'end') for q in fan])

    # topic: * one word, # zero or more
    ch.exchange_declare('pk.topic', exchange_type='topic')
    q1 = ch.queue_declare('', exclusive=True).method.queue
    q2 = ch.queue_declare('', exclusive=True).method.queue
    ch.queue_bind(q1, 'pk.topic', '*.orange.*')
    ch.queue_bind(q2, 'pk.topic', '*.*.rabbit')
    ch.queue_bind(q2, 'pk.topic', 'lazy.#')
    for k in ['quick.orange.rabbit', 'lazy.orange.elephant', 'quick.orange.fox', 'lazy.brown.fox', 'lazy.pink.rabbit',
              'quick.brown.fox', 'orange', 'quick.orange.male.rabbit', 'lazy', 'lazy.orange.male.rabbit']:
        ch.basic_publish('pk.topic', k, k.encode())
    ch.basic_publish('pk.topic', 'end.orange.rabbit', b'end')
    out(step='topic', q1=get_until(ch, q1, 'end'), q2=get_until(ch, q2, 'end'))

    # headers: x-match all / any on amq.headers
    qa = ch.queue_declare('', exclusive=True).method.queue
    qy = ch.queue_declare('', exclusive=True).method.queue
    ch.queue_bind(qa, 'amq.headers', arguments={'x-match': 'all', 'format': 'pdf', 'type': 'report'})
    ch.queue_bind(qy, 'amq.headers', arguments={'x-match': 'any', 'format': 'pdf', 'type': 'log'})
    for body, h in [('pdf-report', {'format': 'pdf', 'type': 'report'}), ('pdf', {'format': 'pdf'}),
                    ('log', {'type': 'log'}), ('zip', {'format': 'zip', 'type': 'report'}), ('none', None),
                    ('end', {'format': 'pdf', 'type': 'report', 'extra': 1})]:
        ch.basic_publish('amq.headers', '', body.encode(), pika.BasicProperties(headers=h))
    out(step='headers', all=get_until(ch, qa, 'end'), any=get_until(ch, qy, 'end'))

    # every property and every header type pika encodes
    q = ch.queue_declare('', exclusive=True).method.queue
    ts = int(time.time())
    headers = {
        'str': 'text', 'bytes': b'\x00\x01\xff', 'true': True, 'false': False, 'int': 42, 'neg': -7, 'big': 2 ** 40,
        'dec': decimal.Decimal('3.14'), 'when': datetime.datetime(2024, 5, 6, 7, 8, 9), 'nested': {'a': 'b', 'n': 1},
        'list': [1, 'two', False], 'none': None,
    }
    props = pika.BasicProperties(content_type='application/json', content_encoding='identity', headers=headers,
                                 delivery_mode=2, priority=5, correlation_id='corr-7', reply_to='pk.replies',
                                 expiration='600000', message_id='msg-7', timestamp=ts, type='order.created',
                                 app_id='pika-e2e')
    ch.basic_publish('', q, b'\x00binary\xffbody', props)
    method, p, body = ch.basic_get(q, auto_ack=True)

    def enc(v):
        if isinstance(v, bytes):
            return {'bytes': list(v)}
        if isinstance(v, decimal.Decimal):
            return {'decimal': str(v)}
        if isinstance(v, datetime.datetime):
            return {'datetime': v.isoformat()}
        if isinstance(v, dict):
            return {k: enc(x) for k, x in v.items()}
        if isinstance(v, list):
            return [enc(x) for x in v]
        return v

    out(step='properties', body=list(body), sent_ts=ts, exchange=method.exchange, routing_key=method.routing_key,
        props={'content_type': p.content_type, 'content_encoding': p.content_encoding, 'delivery_mode': p.delivery_mode,
               'priority': p.priority, 'correlation_id': p.correlation_id, 'reply_to': p.reply_to,
               'expiration': p.expiration, 'message_id': p.message_id, 'timestamp': p.timestamp, 'type': p.type,
               'app_id': p.app_id, 'user_id': p.user_id, 'cluster_id': p.cluster_id},
        headers=enc(p.headers), sent_headers=enc(headers))
    ch.exchange_delete('pk.fan')
    ch.exchange_delete('pk.topic')
    c.close()


def confirms(port):
    c = connect(port)
    ch = c.channel()
    ch.confirm_delivery()
    ch.queue_declare('pk.confirmed', durable=True)
    ch.queue_purge('pk.confirmed')
    acked = 0
    for i in range(50):
        # BlockingChannel.basic_publish waits for this publish's confirm and raises on a nack or a return.
        ch.basic_publish('', 'pk.confirmed', b'c%d' % i, pika.BasicProperties(delivery_mode=2), mandatory=True)
        acked += 1
    out(step='acked', acked=acked, ready=ch.queue_declare('pk.confirmed', passive=True).method.message_count)

    try:
        ch.basic_publish('amq.direct', 'pk.nobody', b'lost', pika.BasicProperties(message_id='r-1'), mandatory=True)
        out(step='unroutable', raised=None)
    except pika.exceptions.UnroutableError as e:
        m = e.messages[0]
        out(step='unroutable', raised='UnroutableError', reply_code=m.method.reply_code, reply_text=m.method.reply_text,
            exchange=m.method.exchange, routing_key=m.method.routing_key, body=m.body.decode(), message_id=m.properties.message_id)
    # Not mandatory: an unroutable publish is simply confirmed.
    ch.basic_publish('amq.direct', 'pk.nobody', b'dropped')
    out(step='unroutable-not-mandatory', ok=True)

    ch.queue_declare('pk.full', arguments={'x-max-length': 1, 'x-overflow': 'reject-publish'})
    ch.queue_purge('pk.full')
    ch.basic_publish('', 'pk.full', b'first')
    try:
        ch.basic_publish('', 'pk.full', b'second')
        out(step='full', raised=None)
    except pika.exceptions.NackError as e:
        out(step='full', raised='NackError', bodies=[m.body.decode() for m in e.messages])
    method, _p, body = ch.basic_get('pk.full', auto_ack=True)
    out(step='full-content', body=body.decode(), remaining=method.message_count, channel_open=ch.is_open)
    ch.queue_delete('pk.full')
    ch.queue_delete('pk.confirmed')
    c.close()


def get(port):
    c = connect(port)
    ch = c.channel()
    q = ch.queue_declare('', exclusive=True).method.queue
    method, props, body = ch.basic_get(q)
    out(step='empty', method=None if method is None else str(method))
    for i in range(3):
        ch.basic_publish('', q, b'g%d' % i)
    ch.basic_publish('', q, b'end')  # routed before the next get: same channel, in order
    first, _p, b1 = ch.basic_get(q, auto_ack=False)
    out(step='first', body=b1.decode(), redelivered=first.redelivered, message_count=first.message_count, tag=first.delivery_tag)
    ch.basic_nack(first.delivery_tag, requeue=True)
    again, _p, b2 = ch.basic_get(q, auto_ack=False)
    out(step='again', body=b2.decode(), redelivered=again.redelivered, message_count=again.message_count, tag=again.delivery_tag)
    ch.basic_ack(again.delivery_tag)
    second, _p, b3 = ch.basic_get(q, auto_ack=False)
    ch.basic_reject(second.delivery_tag, requeue=False)
    rest = get_until(ch, q, 'end')
    out(step='rest', rejected=b3.decode(), rest=rest, after=ch.basic_get(q)[0] is None)
    c.close()


def channel_error(port):
    c = connect(port)
    ch = c.channel()
    try:
        ch.queue_declare('pk.no-such-queue', passive=True)
        out(step='passive', raised=None)
    except pika.exceptions.ChannelClosedByBroker as e:
        out(step='passive', raised='ChannelClosedByBroker', code=e.reply_code, text=e.reply_text, channel_open=ch.is_open,
            connection_open=c.is_open)
    # A publish to a missing exchange: the broker closes the channel (asynchronously); the next call sees it.
    ch2 = c.channel()
    ch2.basic_publish('pk.no-such-exchange', 'k', b'x')
    try:
        ch2.queue_declare('', exclusive=True)
        out(step='publish', raised=None)
    except pika.exceptions.ChannelClosedByBroker as e:
        out(step='publish', raised='ChannelClosedByBroker', code=e.reply_code, text=e.reply_text)
    # Redeclaring with other properties: 406.
    ch3 = c.channel()
    ch3.queue_declare('pk.shape', durable=False, auto_delete=True)
    ch4 = c.channel()
    try:
        ch4.queue_declare('pk.shape', durable=True)
        out(step='redeclare', raised=None)
    except pika.exceptions.ChannelClosedByBroker as e:
        out(step='redeclare', raised='ChannelClosedByBroker', code=e.reply_code, text=e.reply_text)
    # The connection and its other channels still work.
    ch5 = c.channel()
    q = ch5.queue_declare('', exclusive=True).method.queue
    ch5.basic_publish('', q, b'still here')
    ch3.basic_publish('', q, b'old channel')
    ch3.basic_publish('', q, b'end')
    out(step='after', connection_open=c.is_open, bodies=get_until(ch5, q, 'end'))
    c.close()
    out(step='closed', ok=True)


def publish(port, queue, n):
    c = connect(port)
    ch = c.channel()
    ch.confirm_delivery()
    ch.queue_declare(queue, durable=True)
    out(step='declared')
    try:
        for i in range(int(n)):
            # Returns once the broker confirmed this message (raises on a nack).
            ch.basic_publish('', queue, b'm%d' % i, pika.BasicProperties(delivery_mode=2, message_id='id-%d' % i))
            out(step='confirmed', i=i)
    except (pika.exceptions.AMQPError, OSError) as e:
        out(step='broken', error=type(e).__name__)


def drain(port, queue):
    c = connect(port)
    ch = c.channel()
    got = []
    while True:
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            break
        got.append({'body': body.decode(), 'message_id': props.message_id, 'delivery_mode': props.delivery_mode})
    out(step='drained', messages=got)
    c.close()


if __name__ == '__main__':
    cmd, args = sys.argv[1], sys.argv[2:]
    {'workqueue': workqueue, 'routing': routing, 'confirms': confirms, 'get': get, 'channel-error': channel_error,
     'publish': publish, 'drain': drain}[cmd](*args)
