/**
 * Child process of the queue stores' kill -9 tests: appends to queue "q" of the store in argv[2] as fast as it
 * can (many calls in flight), and removes every third message once its append resolved; prints "a <id>" once an
 * append resolved and "r <id>" once a removal resolved. The test SIGKILLs it in the middle and checks that every
 * printed change is in the reopened store.
 */
import { SqliteQueueStore } from '../../src/storage/queues/index.js';

const store = await SqliteQueueStore.open(process.argv[2]);
await store.openQueue('q');
let next = 1;
const out: string[] = [];
const flushOut = (): void => {
  if (out.length > 0) process.stdout.write(out.join(''));
  out.length = 0;
};
setInterval(flushOut, 5);
const one = async (): Promise<void> => {
  for (;;) {
    const id = next++;
    const data = Buffer.alloc(200 + (id % 700), id % 251);
    data.writeUInt32BE(id, 0);
    await store.append('q', [{ id, data }]);
    out.push(`a ${id}\n`);
    if (id % 3 === 0) {
      await store.remove('q', [id]);
      out.push(`r ${id}\n`);
    }
  }
};
for (let i = 0; i < 32; i++) void one();
