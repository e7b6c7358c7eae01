export type { ObjectInfo, ObjectStore } from './types.js';
export { FsObjectStore } from './fs-store.js';
