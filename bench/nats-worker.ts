/**
 * The NATS bench's subscribers (or its responder), run in a worker thread by nats.ts: connections of their own
 * beside the publisher, as another application would be. Says 'ready' once every subscription is in place (a PING
 * answered after the SUB), and answers with its result when the main thread says 'stop'.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { workerMain, type NatsWorkerData } from './nats.js';

if (parentPort === null) throw new Error('nats-worker.js runs as a worker thread of the NATS benchmark');
const port = parentPort;
const stopped = new Promise<void>((resolve) => port.once('message', () => resolve()));
workerMain(workerData as NatsWorkerData, () => port.postMessage('ready'), stopped).then(
  (result) => port.postMessage(result),
  (err: unknown) => port.postMessage({ errors: [`worker: ${err instanceof Error ? err.message : String(err)}`], closed: 0 }),
);
