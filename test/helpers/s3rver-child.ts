/**
 * Runs s3rver in a process of its own for test/helpers/s3.ts (so it neither shares the event loop with the code
 * under test nor loses the network with the test process), started with `--openssl-legacy-provider`: s3rver
 * 3.7.1 encrypts list continuation tokens with DES, which OpenSSL 3 (Node 20) loads only from its legacy provider;
 * without it every truncated listing fails with InternalError.
 *
 * Argument: JSON {directory, bucket, port}. Prints one JSON line {port} once listening; exits when its stdin
 * closes (the parent went away).
 */
import { unlink } from 'node:fs/promises';
import { createRequire } from 'node:module';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';

interface S3rverObject {
  content: { destroy(): void } | null;
  range?: unknown;
  readonly size: number;
}
interface S3rverInstance {
  run(): Promise<AddressInfo>;
  httpServer?: Server;
  store: {
    getObject(bucket: string, key: string, options?: unknown): Promise<S3rverObject | null>;
    putObject(object: { bucket: string; key: string }): Promise<unknown>;
    deleteObject(bucket: string, key: string): Promise<void>;
    getResourcePath(bucket: string, key: string, kind: string): string;
  };
}
type S3rverClass = new (options: Record<string, unknown>) => S3rverInstance;

// `node --test dist/test/` also runs this file, with no argument: there is nothing to serve then.
if (process.argv[2] === undefined) process.exit(0);

const require = createRequire(import.meta.url);
const { directory, bucket, port } = JSON.parse(process.argv[2]) as { directory: string; bucket: string; port: number };
const S3rver = require('s3rver') as S3rverClass;
const s = new S3rver({ address: '127.0.0.1', port, directory, silent: true, configureBuckets: [{ name: bucket }] });

// s3rver answers a ranged GET of an empty object with 206 and "Content-Length: 1" but sends no byte, so the
// client waits until its timeout. S3 answers 416 InvalidRange there, which s3rver itself sends for an object with
// a range but no content: the object is handed back that way.
const getObject = s.store.getObject.bind(s.store);
s.store.getObject = async (b, key, options) => {
  const o = await getObject(b, key, options);
  if (o !== null && o.range !== undefined && o.size === 0 && o.content !== null) {
    o.content.destroy();
    o.content = null;
  }
  return o;
};

// s3rver writes an object straight into its file, so two PUTs of one key at once interleave their bytes and a GET
// during a PUT reads a partial object; S3 makes a PUT visible whole and atomically. PUTs of a key are run one after
// the other here, and a GET waits for the PUTs of its key issued before it: old object or whole new one.
const writes = new Map<string, Promise<unknown>>();
const putObject = s.store.putObject.bind(s.store);
s.store.putObject = (object) => {
  const k = `${object.bucket}/${object.key}`;
  const run = (writes.get(k) ?? Promise.resolve()).then(() => putObject(object));
  const settled = run.catch(() => undefined);
  writes.set(k, settled);
  void settled.then(() => {
    if (writes.get(k) === settled) writes.delete(k);
  });
  return run;
};
const readObject = s.store.getObject;
s.store.getObject = async (b, key, options) => {
  await writes.get(`${b}/${key}`);
  return readObject(b, key, options);
};

// s3rver's deleteObject removes the directories a delete leaves empty. A PUT into the same "directory" at that
// moment (a segment sealed while retention deletes the partition's last older one) has made its directory and
// then opens its file in a removed one: the write stream's ENOENT has no listener and kills s3rver. S3 has no
// directories, and s3rver lists only files, so deletes here remove the object's files and leave the directories.
s.store.deleteObject = async (b, key) => {
  await Promise.all(
    (['object', 'object.md5', 'metadata.json'] as const).map((kind) =>
      unlink(s.store.getResourcePath(b, key, kind)).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== 'ENOENT') throw err;
      }),
    ),
  );
};

const address = await s.run();
// Node's default (5 s) would have clients meet connections closed under them between requests.
if (s.httpServer) s.httpServer.keepAliveTimeout = 60_000;
process.stdout.write(`${JSON.stringify({ port: address.port })}\n`);
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
