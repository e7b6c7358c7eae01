/**
 * A real S3-compatible server for tests and benchmarks: s3rver (npm) on 127.0.0.1, on a free port, keeping its
 * objects in a temporary directory, with one bucket created. It runs in a child process (s3rver-child.ts says
 * why); `stop()` kills it (open connections are cut, as in an outage), `start()` brings it back on the same port
 * with the same data.
 *
 * A plain module (no node:test imports), so bench/ can use it too.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface S3TestServer {
  /** `http://127.0.0.1:<port>` */
  endpoint: string;
  bucket: string;
  port: number;
  /** The credentials s3rver checks signatures against, and the region it signs for. */
  accessKeyId: string;
  secretAccessKey: string;
  region: string;
  /** Where s3rver keeps the objects. */
  directory: string;
  /** Takes the server off the network (kills it); the data stays. */
  stop(): Promise<void>;
  /** Starts it again, on the same port, with the same data. */
  start(): Promise<void>;
  /** Stops it and removes its data. */
  close(): Promise<void>;
}

export interface StartS3Options {
  bucket?: string;
  /** A fixed port; default: a free one. */
  port?: number;
}

const CHILD = fileURLToPath(new URL('./s3rver-child.js', import.meta.url));

export async function startS3(opts: StartS3Options = {}): Promise<S3TestServer> {
  const bucket = opts.bucket ?? 'flowmq-test';
  const directory = await mkdtemp(join(tmpdir(), 'flowmq-s3rver-'));
  let port = opts.port ?? 0;
  let child: ChildProcess | null = null;

  const start = async (): Promise<void> => {
    if (child !== null) return;
    const c = spawn(process.execPath, ['--openssl-legacy-provider', CHILD, JSON.stringify({ directory, bucket, port })], {
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    port = await new Promise<number>((resolve, reject) => {
      let out = '';
      const onData = (d: Buffer): void => {
        out += d.toString();
        const nl = out.indexOf('\n');
        if (nl < 0) return;
        c.stdout!.off('data', onData);
        c.off('exit', onExit);
        resolve((JSON.parse(out.slice(0, nl)) as { port: number }).port);
      };
      const onExit = (code: number | null, signal: string | null): void => reject(new Error(`s3rver exited at start (code ${code}, signal ${signal})`));
      c.stdout!.on('data', onData);
      c.once('exit', onExit);
      c.once('error', reject);
    });
    // Nothing more is read from its stdout; a dead child is noticed by stop().
    c.stdout!.resume();
    child = c;
  };

  const stop = async (): Promise<void> => {
    const c = child;
    if (c === null) return;
    child = null;
    if (c.exitCode === null && c.signalCode === null) {
      const exited = new Promise((resolve) => c.once('exit', resolve));
      c.kill('SIGKILL');
      await exited;
    }
  };

  await start();
  return {
    endpoint: `http://127.0.0.1:${port}`,
    bucket,
    port,
    accessKeyId: 'S3RVER',
    secretAccessKey: 'S3RVER',
    region: 'us-east-1',
    directory,
    stop,
    start,
    close: async () => {
      await stop();
      await rm(directory, { recursive: true, force: true, maxRetries: 5 });
    },
  };
}
