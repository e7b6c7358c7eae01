/**
 * The AMQP bench's consumers, run in a worker thread by runAmqpLoad (amqp.ts): clients of their own beside the
 * publishers, as a consuming application would be. Says 'ready' once every consumer is subscribed, and answers with
 * its figures when the main thread says 'stop'.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { consumeQueue, type AmqpConsumerData } from './amqp.js';
import { percentiles } from './util.js';

if (parentPort === null) throw new Error('amqp-consumer.js runs as a worker thread of the AMQP benchmark');
const port = parentPort;
const stopped = new Promise<void>((resolve) => port.once('message', () => resolve()));
consumeQueue(workerData as AmqpConsumerData, () => port.postMessage('ready'), stopped).then(
  (result) => port.postMessage(result),
  (err: unknown) =>
    port.postMessage({
      consumed: 0,
      consumedInWindow: 0,
      redelivered: 0,
      endToEnd: percentiles([]),
      errors: [`consumer: ${err instanceof Error ? err.message : String(err)}`],
    }),
);
