"""
Debian's confluent-kafka (librdkafka 2.0.2) as a transactional client, driven by
test/e2e/kafka-transactions-librdkafka.test.ts against a real FlowMQ broker. Every step prints one JSON line.

  ctp BOOTSTRAP IN OUT GROUP   consume-transform-produce: reads IN read_committed in group GROUP, writes each value
                               upper-cased to OUT in a transaction with send_offsets_to_transaction, commits; then
                               a transaction of three records that is aborted, then a committed marker; then reads
                               OUT read_committed and read_uncommitted, and the group's committed offsets
  fence BOOTSTRAP TOPIC        two producers with one transactional.id: the first, fenced by the second, fails
"""
import json
import sys
import uuid

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def out(**kw):
    print(json.dumps(kw), flush=True)


def read_until(bootstrap, topic, isolation, last):
    c = Consumer({'bootstrap.servers': bootstrap, 'group.id': 'reader-' + uuid.uuid4().hex, 'auto.offset.reset': 'earliest',
                  'isolation.level': isolation, 'enable.auto.commit': False})
    c.subscribe([topic])
    values = []
    for _ in range(300):
        m = c.poll(0.1)
        if m is None or m.error():
            continue
        values.append(m.value().decode())
        if values[-1] == last:
            break
    c.close()
    return values


def ctp(bootstrap, tin, tout, group):
    plain = Producer({'bootstrap.servers': bootstrap})
    for i in range(5):
        plain.produce(tin, value=b'in-%d' % i, partition=0)
    plain.flush(10)

    p = Producer({'bootstrap.servers': bootstrap, 'transactional.id': 'py-ctp', 'transaction.timeout.ms': 30000})
    p.init_transactions(10)
    out(step='init')
    c = Consumer({'bootstrap.servers': bootstrap, 'group.id': group, 'auto.offset.reset': 'earliest',
                  'isolation.level': 'read_committed', 'enable.auto.commit': False})
    c.subscribe([tin])
    got = []
    for _ in range(300):
        m = c.poll(0.1)
        if m is None or m.error():
            continue
        got.append(m)
        if len(got) == 5:
            break
    out(step='consumed', values=[m.value().decode() for m in got])
    p.begin_transaction()
    for m in got:
        p.produce(tout, value=m.value().decode().upper().encode(), partition=0)
    p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 10)
    before = c.committed([TopicPartition(tin, 0)], 10)[0].offset
    p.commit_transaction(10)
    after = c.committed([TopicPartition(tin, 0)], 10)[0].offset
    out(step='committed', before=before, after=after)
    c.close()

    p.begin_transaction()
    for i in range(3):
        p.produce(tout, value=b'aborted-%d' % i, partition=0)
    p.flush(10)
    p.abort_transaction(10)
    out(step='aborted')
    p.begin_transaction()
    p.produce(tout, value=b'marker', partition=0)
    p.commit_transaction(10)
    out(step='read_committed', values=read_until(bootstrap, tout, 'read_committed', 'marker'))
    out(step='read_uncommitted', values=read_until(bootstrap, tout, 'read_uncommitted', 'marker'))


def fence(bootstrap, topic):
    conf = {'bootstrap.servers': bootstrap, 'transactional.id': 'py-fence'}
    p1 = Producer(conf)
    p1.init_transactions(10)
    p1.begin_transaction()
    p1.produce(topic, value=b'zombie', partition=0)
    p1.flush(10)
    p2 = Producer(conf)
    p2.init_transactions(10)
    out(step='second-initialized')
    try:
        p1.produce(topic, value=b'zombie-2', partition=0)
        p1.flush(10)
        p1.commit_transaction(10)
        out(step='zombie', error=None)
    except KafkaException as e:
        err = e.args[0]
        out(step='zombie', error=err.name(), fatal=err.fatal())
    p2.begin_transaction()
    p2.produce(topic, value=b'marker', partition=0)
    p2.commit_transaction(10)
    out(step='read_committed', values=read_until(bootstrap, topic, 'read_committed', 'marker'))


if __name__ == '__main__':
    mode = sys.argv[1]
    if mode == 'ctp':
        ctp(*sys.argv[2:6])
    elif mode == 'fence':
        fence(*sys.argv[2:4])
    else:
        raise SystemExit('unknown mode ' + mode)
