"""
kafka-python (Debian's python3-kafka, a pure-Python Kafka client) driven by test/e2e/kafka-python.test.ts against
a real FlowMQ broker. Every step prints one JSON line for the test to check; the client does the protocol work.

  roundtrip BOOTSTRAP TOPIC GROUP   admin, producers with every codec, a consumer group, offsets, partitions
  produce BOOTSTRAP TOPIC FROM TO   values FROM..TO-1, round robin over the topic's partitions, acks=all
  sasl BOOTSTRAP MECHANISM USER PASSWORD TOPIC
                                    SASL_PLAINTEXT: produce a record and read it back, or say why it failed
  member BOOTSTRAP TOPIC GROUP      one consumer group member: prints its assignment and what it reads until
                                    a line "leave" arrives on stdin, then closes (LeaveGroup) and exits
"""
import json
import sys
import threading
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic

CODECS = [None, 'gzip', 'snappy', 'lz4', 'zstd']


def out(**kw):
    print(json.dumps(kw), flush=True)


def roundtrip(bootstrap, topic, group):
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id='kp-admin')
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
    out(step='topics', topics=sorted(admin.list_topics()))
    res = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])[0].resources[0]
    out(step='configs', error=res[0], configs={c[0]: c[1] for c in res[4]})

    produced = []
    for codec in CODECS:
        p = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec, acks='all', linger_ms=5)
        sent = []
        for i in range(20):
            value = json.dumps({'codec': codec or 'none', 'i': i}).encode()
            sent.append((i, p.send(topic, key=b'k%d' % (i % 7), value=value, headers=[('codec', (codec or 'none').encode())])))
        p.flush()
        for i, f in sent:
            md = f.get(timeout=10)
            produced.append({'codec': codec or 'none', 'i': i, 'partition': md.partition, 'offset': md.offset, 'timestamp': md.timestamp})
        p.close()
    out(step='produced', records=produced)

    parts = [TopicPartition(topic, i) for i in range(3)]
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset='earliest',
                      enable_auto_commit=False, consumer_timeout_ms=4000)
    got = []
    for m in c:
        got.append({'partition': m.partition, 'offset': m.offset, 'key': m.key.decode(), 'value': json.loads(m.value),
                    'headers': [[k, v.decode()] for k, v in m.headers], 'timestamp': m.timestamp})
    c.commit()
    out(step='consumed', records=got, committed=[c.committed(tp) for tp in parts],
        end=[c.end_offsets(parts)[tp] for tp in parts], beginning=[c.beginning_offsets(parts)[tp] for tp in parts])
    # The first offset at or after the timestamp of partition 0's 5th record.
    p0 = sorted((r for r in produced if r['partition'] == 0), key=lambda r: r['offset'])
    ts = p0[4]['timestamp']
    found = c.offsets_for_times({parts[0]: ts})[parts[0]]
    out(step='by-time', timestamp=ts, offset=found.offset if found else None, expected=min(r['offset'] for r in p0 if r['timestamp'] >= ts))
    c.close()

    again = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset='earliest',
                          consumer_timeout_ms=3000)
    out(step='resumed', records=sum(1 for _ in again))
    again.close()

    groups = admin.list_consumer_groups()
    desc = admin.describe_consumer_groups([group])[0]
    offsets = admin.list_consumer_group_offsets(group)
    out(step='groups', groups=[g[0] for g in groups], state=desc.state,
        offsets=sorted([tp.partition, om.offset] for tp, om in offsets.items()))
    admin.create_partitions({topic: NewPartitions(total_count=5)})
    probe = KafkaConsumer(bootstrap_servers=bootstrap)
    out(step='partitions', count=len(probe.partitions_for_topic(topic)))
    probe.close()
    admin.delete_consumer_groups([group])
    admin.delete_topics([topic])
    deadline = time.time() + 5
    while topic in admin.list_topics() and time.time() < deadline:
        time.sleep(0.1)
    out(step='deleted', topics=sorted(admin.list_topics()), groups=[g[0] for g in admin.list_consumer_groups()])
    admin.close()


def produce(bootstrap, topic, first, end):
    p = KafkaProducer(bootstrap_servers=bootstrap, acks='all')
    n = len(p.partitions_for(topic))
    futures = [p.send(topic, value=str(i).encode(), partition=i % n) for i in range(int(first), int(end))]
    p.flush()
    for f in futures:
        f.get(timeout=10)
    p.close()
    out(step='produced', count=len(futures))


def sasl(bootstrap, mechanism, user, password, topic):
    auth = dict(bootstrap_servers=bootstrap, security_protocol='SASL_PLAINTEXT', sasl_mechanism=mechanism,
                sasl_plain_username=user, sasl_plain_password=password)
    try:
        p = KafkaProducer(acks='all', **auth)
        md = p.send(topic, value=mechanism.encode()).get(timeout=10)
        p.close()
        c = KafkaConsumer(**auth, auto_offset_reset='earliest', consumer_timeout_ms=3000)
        tp = TopicPartition(topic, md.partition)
        c.assign([tp])
        c.seek(tp, md.offset)
        got = next(iter(c)).value.decode()
        c.close()
        out(step='sasl', ok=True, value=got)
    except Exception as e:  # the test checks which failure it was
        out(step='sasl', ok=False, error=type(e).__name__ + ': ' + str(e))


def member(bootstrap, topic, group):
    leave = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), leave.set()), daemon=True).start()
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset='earliest',
                      session_timeout_ms=6000, heartbeat_interval_ms=500, max_poll_interval_ms=60000)
    shown = None
    while not leave.is_set():
        batches = c.poll(timeout_ms=100)
        for tp, msgs in batches.items():
            out(step='read', records=[[tp.partition, m.offset, m.value.decode()] for m in msgs])
        now = sorted(tp.partition for tp in c.assignment())
        if now != shown:
            shown = now
            out(step='assigned', partitions=now)
    c.close()
    out(step='left')


if __name__ == '__main__':
    {'roundtrip': roundtrip, 'produce': produce, 'sasl': sasl, 'member': member}[sys.argv[1]](*sys.argv[2:])
