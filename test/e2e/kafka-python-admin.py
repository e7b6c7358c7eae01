"""
kafka-python's KafkaAdminClient (Debian's python3-kafka 2.0.2) driving FlowMQ's admin APIs, for
test/e2e/kafka-admin-tools.test.ts. Every step prints one JSON line; the client does the protocol work.

  admin BOOTSTRAP TOPIC GROUP   topic and broker configs (described with synonyms, altered), a consumer group's
                                offsets and description, the cluster

kafka-python 2.0.2 has no describe_log_dirs and no delete_consumer_group_offsets: those are exercised with KafkaJS
and librdkafka (and at the byte level).
"""
import json
import sys

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic


def out(**kw):
    print(json.dumps(kw), flush=True)


def entries(res, names):
    """name -> [value, read_only, source, is_sensitive, synonyms] of a DescribeConfigs v1+ resource."""
    got = {}
    for e in res[4]:
        if e[0] in names:
            got[e[0]] = [e[1], e[2], e[3], e[4], [[s[0], s[1], s[2]] for s in e[5]]]
    return got


def admin(bootstrap, topic, group):
    a = KafkaAdminClient(bootstrap_servers=bootstrap, client_id='kp-admin-ops')
    a.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1, topic_configs={'retention.ms': '7200000'})])
    p = KafkaProducer(bootstrap_servers=bootstrap, acks='all')
    for i in range(10):
        p.send(topic, value=b'v%d' % i, partition=i % 2)
    p.flush()
    p.close()
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset='earliest',
                      enable_auto_commit=False, consumer_timeout_ms=3000)
    n = sum(1 for _ in c)
    c.commit()
    c.close()
    out(step='consumed', count=n)

    names = ['retention.ms', 'cleanup.policy', 'segment.bytes', 'min.insync.replicas']
    res = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], include_synonyms=True)[0].resources[0]
    out(step='topic-configs', error=res[0], count=len(res[4]), configs=entries(res, names))
    bnames = ['broker.id', 'num.partitions', 'log.retention.ms', 'log.retention.hours', 'num.io.threads', 'ssl.keystore.password']
    res = a.describe_configs([ConfigResource(ConfigResourceType.BROKER, '0')], include_synonyms=True)[0].resources[0]
    out(step='broker-configs', error=res[0], count=len(res[4]), configs=entries(res, bnames))

    # AlterConfigs (kafka-python has no incremental alter): the topic's whole set is replaced.
    r = a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={'retention.ms': '3600000', 'min.insync.replicas': '2'})])
    out(step='alter-topic', errors=[[x[0], x[1]] for x in r.resources])
    r = a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={'retention.ms': 'soon'})])
    out(step='alter-topic-bad', errors=[[x[0], x[1]] for x in r.resources])
    res = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], include_synonyms=True)[0].resources[0]
    out(step='topic-configs-after', configs=entries(res, names))
    # A broker's dynamic config, then a static one (refused).
    r = a.alter_configs([ConfigResource(ConfigResourceType.BROKER, '0', configs={'log.retention.bytes': '1073741824'})])
    out(step='alter-broker', errors=[[x[0], x[1]] for x in r.resources])
    r = a.alter_configs([ConfigResource(ConfigResourceType.BROKER, '0', configs={'num.io.threads': '16'})])
    out(step='alter-broker-static', errors=[[x[0], x[1]] for x in r.resources])
    res = a.describe_configs([ConfigResource(ConfigResourceType.BROKER, '0')], include_synonyms=True)[0].resources[0]
    out(step='broker-configs-after', configs=entries(res, ['log.retention.bytes']))

    offsets = a.list_consumer_group_offsets(group)
    out(step='group-offsets', offsets=sorted([[tp.topic, tp.partition, om.offset] for tp, om in offsets.items()]))
    d = a.describe_consumer_groups([group])[0]
    out(step='describe-group', group=d.group, state=d.state, protocol_type=d.protocol_type, members=len(d.members))
    cl = a.describe_cluster()
    out(step='cluster', cluster_id=cl.get('cluster_id'), controller=cl.get('controller_id'),
        brokers=[[b['node_id'], b['host'], b['port']] for b in cl.get('brokers', [])])
    a.close()
    out(step='done')


if __name__ == '__main__':
    {'admin': admin}[sys.argv[1]](*sys.argv[2:])
