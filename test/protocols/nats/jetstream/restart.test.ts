/**
 * A JetStream consumer over the embedded storage (SQLite metastore, file WAL, filesystem objects): its position
 * survives closing and reopening everything, as a broker restart does.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { JetStream } from '../../../../src/protocols/nats/jetstream/index.js';
import { SqliteMetastore } from '../../../../src/storage/metastore/index.js';
import { FsObjectStore } from '../../../../src/storage/objects/index.js';
import { FileWal } from '../../../../src/storage/wal/index.js';
import { openLogEngine } from '../../../helpers/log-engine.js';
import { ackSubject, Client, natsSubject, silent } from './harness.js';

async function open(dir: string) {
  const metastore = SqliteMetastore.open(join(dir, 'meta.db'));
  const objects = new FsObjectStore(join(dir, 'objects'));
  const wal = await FileWal.open(join(dir, 'wal'));
  const { log, engine } = await openLogEngine({ wal, objects, metastore }, silent);
  const js = new JetStream(engine, silent, { tickMs: 20, flushDelayMs: 5 });
  await js.start();
  return {
    engine,
    c: new Client(engine, js),
    async close() {
      await js.close();
      engine.close();
      await log.close();
      await wal.close();
      await metastore.close();
    },
  };
}

describe('JetStream consumer over the embedded storage', () => {
  it('keeps its ack floor, out-of-order acks and consumer sequence across a restart', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'flowmq-js-'));
    try {
      const a = await open(dir);
      await a.c.api('$JS.API.STREAM.CREATE.R', { name: 'R', subjects: ['r.>'] });
      for (let i = 1; i <= 6; i++) assert.deepEqual(await a.c.publish(`r.${i}`, `m${i}`), { stream: 'R', seq: i });
      await a.c.api('$JS.API.CONSUMER.CREATE.R.d', { stream_name: 'R', config: { durable_name: 'd', ack_policy: 'explicit' } });
      await a.c.api('$JS.API.CONSUMER.CREATE.R.f', { stream_name: 'R', config: { durable_name: 'f', ack_policy: 'explicit', filter_subject: 'r.5' } });
      const got = await a.c.fetch('R', 'd', { batch: 4, no_wait: true }, 4);
      a.c.ack(got[0]);
      a.c.ack(got[1]);
      await a.c.ackSync(got[3]);
      await a.close();

      const b = await open(dir);
      const info = await b.c.api('$JS.API.CONSUMER.INFO.R.d');
      assert.equal(info.ack_floor.stream_seq, 2);
      assert.equal(info.delivered.stream_seq, 4);
      assert.equal(info.delivered.consumer_seq, 4);
      assert.deepEqual((await b.c.api('$JS.API.CONSUMER.NAMES.R')).consumers, ['d', 'f']);
      const again = await b.c.fetch('R', 'd', { batch: 3, no_wait: true }, 3);
      assert.deepEqual(again.map(natsSubject), ['r.3', 'r.5', 'r.6']);
      assert.equal(ackSubject(again[0]).split('.')[6], '5');
      const f = await b.c.fetch('R', 'f', { batch: 1, no_wait: true }, 1);
      assert.equal(natsSubject(f[0]), 'r.5');
      await b.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
