"""A RabbitMQ super stream declared by hand with pika (Debian's python3-pika), then used: run by
amqp-super-stream.test.ts against FlowMQ, and by test/interop/rabbitmq-super-stream/run.sh against RabbitMQ too.
Prints one JSON line of what each step answered, so the two brokers' lines can be compared.

usage: amqp-super-stream-pika.py PORT NAME"""
import json
import sys

import pika

port = int(sys.argv[1])
name = sys.argv[2]
params = pika.ConnectionParameters(host='127.0.0.1', port=port, heartbeat=10,
                                   credentials=pika.PlainCredentials('guest', 'guest'))
conn = pika.BlockingConnection(params)
out = {}


def soft_error(fn):
    """Runs fn on a channel of its own connection; the reply code of the close it provokes (a connection.close as
    'connection <code>'), or 'ok'."""
    c = pika.BlockingConnection(params)
    try:
        fn(c.channel())
        c.close()
        return 'ok'
    except pika.exceptions.ChannelClosedByBroker as e:
        c.close()
        return e.reply_code
    except pika.exceptions.ConnectionClosedByBroker as e:
        return 'connection %d' % e.reply_code


stream_args = {'x-queue-type': 'stream', 'x-max-age': '7D'}
ch = conn.channel()
ch.exchange_declare(name, 'direct', durable=True, arguments={'x-super-stream': True})
for i in range(3):
    ch.queue_declare('%s-%d' % (name, i), durable=True, arguments=stream_args)
for i in range(3):
    ch.queue_bind('%s-%d' % (name, i), name, str(i), arguments={'x-stream-partition-order': i})
ch.confirm_delivery()
for i in range(6):
    ch.basic_publish(name, str(i % 3), b'm%d' % i, pika.BasicProperties(delivery_mode=2, message_id='id%d' % i))
try:
    ch.basic_publish(name, 'nope', b'x', mandatory=True)
    out['unroutable'] = 'published'
except pika.exceptions.UnroutableError:
    out['unroutable'] = 'returned'
out['passive_counts'] = [ch.queue_declare('%s-%d' % (name, i), passive=True).method.message_count for i in range(3)]
ch.basic_qos(prefetch_count=10)
partitions = []
for i in range(3):
    got = []
    for method, props, body in ch.consume('%s-%d' % (name, i), arguments={'x-stream-offset': 'first'},
                                          inactivity_timeout=5):
        if method is None:
            break
        got.append([body.decode(), props.headers.get('x-stream-offset'), method.routing_key, method.exchange])
        ch.basic_ack(method.delivery_tag)
        if len(got) == 2:
            break
    ch.cancel()
    partitions.append(got)
out['partitions'] = partitions
ch.close()

out['redeclare_same'] = soft_error(lambda c: c.queue_declare('%s-1' % name, durable=True, arguments=stream_args))
out['redeclare_other_age'] = soft_error(lambda c: c.queue_declare(
    '%s-1' % name, durable=True, arguments={'x-queue-type': 'stream', 'x-max-age': '1D'}))
out['redeclare_classic'] = soft_error(lambda c: c.queue_declare(
    '%s-1' % name, durable=True, arguments={'x-queue-type': 'classic'}))
out['redeclare_transient'] = soft_error(lambda c: c.queue_declare(
    '%s-1' % name, durable=False, arguments={'x-queue-type': 'stream'}))
out['redeclare_no_type'] = soft_error(lambda c: c.queue_declare('%s-1' % name, durable=True))
out['queue_named_as_stream'] = soft_error(lambda c: c.queue_declare(name, passive=True))
out['exchange_passive'] = soft_error(lambda c: c.exchange_declare(name, passive=True))
out['exchange_other_type'] = soft_error(lambda c: c.exchange_declare(
    name, 'topic', durable=True, arguments={'x-super-stream': True}))
out['bind_other_order'] = soft_error(lambda c: c.queue_bind('%s-1' % name, name, '1',
                                                            arguments={'x-stream-partition-order': 0}))
out['bind_other_key'] = soft_error(lambda c: c.queue_bind('%s-1' % name, name, 'extra'))
out['get_from_partition'] = soft_error(lambda c: c.basic_get('%s-1' % name))

ch = conn.channel()
out['delete_partition_0'] = ch.queue_delete('%s-0' % name).method.message_count
ch.close()
out['passive_deleted_0'] = soft_error(lambda c: c.queue_declare('%s-0' % name, passive=True))
ch = conn.channel()
ch.confirm_delivery()
try:
    ch.basic_publish(name, '0', b'x', mandatory=True)
    out['publish_deleted_0'] = 'published'
except pika.exceptions.UnroutableError:
    out['publish_deleted_0'] = 'returned'
ch.queue_delete('%s-1' % name)
ch.queue_delete('%s-2' % name)
ch.exchange_delete(name)
ch.close()
conn.close()
print(json.dumps(out, sort_keys=True))
