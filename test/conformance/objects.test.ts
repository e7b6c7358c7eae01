import { FsObjectStore } from '../../src/storage/objects/index.js';
import { objectStoreConformance } from './objects.suite.js';

objectStoreConformance('FsObjectStore', async (dir) => new FsObjectStore(dir));
