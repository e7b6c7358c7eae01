/**
 * The latency benchmark's consumer, run in a worker thread by kafkaLatency (kafka.ts): a client of its own beside
 * the producers, as a consuming application would be. It answers once the main thread says how many records to
 * expect (or by when to give up).
 */
import { parentPort, workerData } from 'node:worker_threads';
import { consumeForLatency, type ConsumerWorkerData, type ConsumerWorkerStop } from './kafka.js';

if (parentPort === null) throw new Error('kafka-consumer.js runs as a worker thread of the latency benchmark');
const port = parentPort;
const stopped = new Promise<ConsumerWorkerStop>((resolve) => port.once('message', (m: ConsumerWorkerStop) => resolve(m)));
consumeForLatency(workerData as ConsumerWorkerData, stopped).then(
  (result) => port.postMessage(result),
  (err: unknown) => port.postMessage({ consumed: 0, errors: 0, stamps: [], latenciesMs: [], error: err instanceof Error ? err.message : String(err) }),
);
