/**
 * The object-store conformance suite against S3ObjectStore on a real S3-compatible server (s3rver), alone and
 * behind the block cache, and against the block cache over the filesystem store. Each `dir` of the suite becomes
 * a bucket prefix of its own, so reopening a `dir` finds its objects again.
 */
import { after } from 'node:test';
import { basename, dirname } from 'node:path';
import { CachedObjectStore, FsObjectStore, S3ObjectStore } from '../../src/storage/objects/index.js';
import { startS3, type S3TestServer } from '../helpers/s3.js';
import { objectStoreConformance } from './objects.suite.js';

let server: Promise<S3TestServer> | null = null;
const s3 = (): Promise<S3TestServer> => (server ??= startS3());
after(async () => {
  if (server !== null) await (await server).close();
});

const openS3 = async (dir: string): Promise<S3ObjectStore> => {
  const srv = await s3();
  return S3ObjectStore.open({
    bucket: srv.bucket,
    prefix: `conformance/${basename(dirname(dir))}/${basename(dir)}`,
    endpoint: srv.endpoint,
    region: srv.region,
    accessKeyId: srv.accessKeyId,
    secretAccessKey: srv.secretAccessKey,
    forcePathStyle: true,
    // S3's smallest part: the suite's 12 MiB object goes up in three parts.
    partBytes: 5 * 1024 * 1024,
    multipartThresholdBytes: 5 * 1024 * 1024,
    // Listing crosses pages in every list test.
    listPageSize: 4,
  });
};

objectStoreConformance('S3ObjectStore (s3rver)', openS3);

// An odd block size, so that ranges, parts and blocks rarely line up.
const cacheOpts = { maxBytes: 4 * 1024 * 1024, blockBytes: 256 * 1024 + 3, readAheadBlocks: 4 };
objectStoreConformance('CachedObjectStore over FsObjectStore', async (dir) => new CachedObjectStore(new FsObjectStore(dir), cacheOpts));
objectStoreConformance('CachedObjectStore over S3ObjectStore (s3rver)', async (dir) => new CachedObjectStore(await openS3(dir), { maxBytes: 8 * 1024 * 1024 }));
