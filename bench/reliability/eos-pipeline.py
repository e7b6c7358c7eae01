"""
An exactly-once consume-transform-produce loop with librdkafka's transactional producer (Debian's
python3-confluent-kafka), driven by bench/reliability/crash-eos-cluster.ts while it kills brokers under it.

  eos-pipeline.py BOOTSTRAP IN OUT GROUP TRANSACTIONAL_ID

Reads IN read_committed in GROUP, writes each record to OUT (same key, value `out-<value>`) in a transaction that
also carries the consumer's positions (send_offsets_to_transaction), and commits. After any error it aborts what
it can, drops its consumer and producer and starts over on the same transactional.id: init_transactions fences
the previous incarnation (and completes or aborts what it left), the new consumer resumes from the group's
committed offsets. A retriable commit error is retried first, as librdkafka documents. Stops after the current
transaction when a line `stop` (or EOF) arrives on stdin; a line `hold` makes it write its next transaction's records
and then wait with the transaction open (to be killed in that state). Every event is one JSON line on stdout.
"""
import json
import os
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaException, Producer

bootstrap, tin, tout, group, txid = sys.argv[1:6]
stop = threading.Event()
hold = threading.Event()


def watch_stdin():
    for line in sys.stdin:
        if line.strip() == 'hold':
            hold.set()
        if line.strip() == 'stop':
            break
    stop.set()


def out(**kw):
    print(json.dumps(kw), flush=True)


def describe(e):
    if isinstance(e, KafkaException) and e.args and hasattr(e.args[0], 'name'):
        err = e.args[0]
        return {'error': err.name(), 'fatal': err.fatal(), 'abortable': err.txn_requires_abort(), 'retriable': err.retriable(),
                'text': err.str()}
    return {'error': type(e).__name__, 'text': str(e)}


def build():
    # EOS_DEBUG=cgrp,eos,fetch...: librdkafka's debug contexts on stderr.
    debug = {'debug': os.environ['EOS_DEBUG'], 'log_level': 7} if os.environ.get('EOS_DEBUG') else {}
    p = Producer({'bootstrap.servers': bootstrap, 'transactional.id': txid, 'transaction.timeout.ms': 10000, 'linger.ms': 5,
                  'log_level': 3, **debug})
    p.init_transactions(60)
    c = Consumer({'bootstrap.servers': bootstrap, 'group.id': group, 'auto.offset.reset': 'earliest',
                  'isolation.level': 'read_committed', 'enable.auto.commit': False, 'session.timeout.ms': 6000,
                  'heartbeat.interval.ms': 1000,
                  # Small fetches: many small transactions, so that kills land between and inside them.
                  'max.partition.fetch.bytes': 2048, 'log_level': 3, **debug})
    c.subscribe([tin])
    return p, c


def commit(p):
    for attempt in range(5):
        try:
            p.commit_transaction(30)
            return
        except KafkaException as e:
            err = e.args[0]
            if err.retriable() and not err.txn_requires_abort() and not err.fatal() and attempt < 4:
                out(ev='retry-commit', **describe(e))
                continue
            raise


def main():
    threading.Thread(target=watch_stdin, daemon=True).start()
    txns = 0
    records = 0
    restarts = 0
    while not stop.is_set():
        p = c = None
        in_txn = False
        try:
            p, c = build()
            out(ev='ready', restarts=restarts)
            last = time.monotonic()
            while not stop.is_set():
                msgs = [m for m in c.consume(50, 0.5) if not m.error()]
                if not msgs:
                    if time.monotonic() - last > 10:
                        # Nothing to copy for 10 s: where the consumer stands (the end of the run, or a stall).
                        last = time.monotonic()
                        out(ev='idle', positions=[[tp.partition, tp.offset] for tp in c.position(c.assignment())])
                    continue
                last = time.monotonic()
                p.begin_transaction()
                in_txn = True
                for m in msgs:
                    p.produce(tout, key=m.key(), value=b'out-' + m.value())
                if hold.is_set():
                    # Asked to hold (the harness kills this process next): the transaction's records are written
                    # to the output's leaders, and the transaction stays open.
                    p.flush(30)
                    out(ev='holding', records=len(msgs))
                    while not stop.is_set():
                        time.sleep(0.1)
                    break
                positions = [tp for tp in c.position(c.assignment()) if tp.offset >= 0]
                p.send_offsets_to_transaction(positions, c.consumer_group_metadata(), 30)
                commit(p)
                in_txn = False
                txns += 1
                records += len(msgs)
                out(ev='commit', txns=txns, records=records)
        except Exception as e:  # noqa: BLE001 - any failure: start over
            out(ev='restart', **describe(e))
            restarts += 1
            if in_txn and p is not None:
                try:
                    p.abort_transaction(10)
                except Exception:  # noqa: BLE001 - fenced or fatal: the next init_transactions aborts it
                    pass
            time.sleep(0.2)
        finally:
            if c is not None:
                try:
                    c.close()
                except Exception:  # noqa: BLE001
                    pass
    out(ev='done', txns=txns, records=records, restarts=restarts)


main()
