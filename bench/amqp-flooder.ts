/**
 * The flooder of the AMQP fairness scenario (runAmqpFairness in amqp.ts), run in a worker thread so that its event
 * loop does not delay the measured client's: one connection publishing persistent messages without confirms to a
 * durable queue as fast as its socket takes them (it waits for 'drain' as an application would). Says 'ready' once
 * connected, floods from 'start', and answers with its count at 'stop'.
 */
import { parentPort, workerData } from 'node:worker_threads';
import amqp from 'amqplib';
import { HOST } from './util.js';

export interface AmqpFlooderData {
  port: number;
  queue: string;
  payloadBytes: number;
  /** Delivery mode 2 (persistent) or 1 (transient: a durable queue past its in-memory window stores it all the same). */
  persistent: boolean;
}

if (parentPort === null) throw new Error('amqp-flooder.js runs as a worker thread of the AMQP benchmark');
const port = parentPort;
const d = workerData as AmqpFlooderData;
const errors: string[] = [];
let published = 0;
let running = false;
let blocked = false;

const conn = await amqp.connect({ hostname: HOST, port: d.port, username: 'guest', password: 'guest', heartbeat: 0 });
conn.on('error', (e: Error) => errors.push(`flooder connection: ${e.message}`));
const ch = await conn.createChannel();
ch.on('error', (e: Error) => errors.push(`flooder channel: ${e.message}`));
await ch.assertQueue(d.queue, { durable: true });
const body = Buffer.alloc(d.payloadBytes, 0x66);
const props = { deliveryMode: d.persistent ? 2 : 1, contentType: 'application/octet-stream' };

function pump(): void {
  let n = 0;
  while (running && !blocked && n < 500) {
    published++;
    n++;
    if (!ch.publish('', d.queue, body, props)) blocked = true;
  }
  if (running && !blocked) setImmediate(pump);
}
ch.on('drain', () => {
  blocked = false;
  pump();
});

port.on('message', (m: 'start' | 'stop') => {
  if (m === 'start') {
    running = true;
    pump();
    return;
  }
  running = false;
  void conn
    .close()
    .catch(() => undefined)
    .then(() => port.postMessage({ published, errors }));
});
port.postMessage('ready');
