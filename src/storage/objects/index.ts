export type { ObjectStore } from './types.js';
export { FsObjectStore } from './fs-store.js';
export { S3ObjectStore, parseS3Url, type S3Options } from './s3-store.js';
export { CachedObjectStore } from './cache.js';
