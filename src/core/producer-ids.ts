/**
 * Producer ids unique across restarts, reserved in blocks from a ProducerIdStore (the metastore in a broker): Kafka's
 * idempotent producers (InitProducerId) and MQTT sessions' publish keys (protocols/mqtt/qos2.ts) take theirs here.
 */
import type { ProducerIdStore } from './offsets.js';

const BLOCK = 100;

/** Hands out ids from blocks reserved in the store, one reservation at a time. */
export class ProducerIdAllocator {
  private next = 0;
  private end = 0;
  private pending: Promise<void> | null = null;

  constructor(private readonly store: ProducerIdStore) {}

  async allocate(): Promise<number> {
    while (this.next >= this.end) {
      this.pending ??= this.store.allocateProducerIds(BLOCK).then(
        (first) => {
          this.next = first;
          this.end = first + BLOCK;
          this.pending = null;
        },
        (err: unknown) => {
          this.pending = null;
          throw err;
        },
      );
      await this.pending;
    }
    return this.next++;
  }
}
