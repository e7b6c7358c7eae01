/** Worker thread of runFuzz (fuzz.ts): runs the job it is given and posts one result per target. */
import { parentPort, workerData } from 'node:worker_threads';
import { workerMain, type WorkerJob } from './fuzz.js';

workerMain(workerData as WorkerJob, (r) => parentPort!.postMessage(r));
