export * from './errors.js';
export * from './message.js';
export * from './topic.js';
export * from './trie.js';
export * from './streams.js';
export * from './engine.js';
export {
  liveKey,
  newPublishInfo,
  type DurableSubscribers,
  type ForwardedDurable,
  type LiveHook,
  type PublishInfo,
  type Subscriber,
  type SubscribeOptions,
  type Subscription,
} from './subscriptions.js';
export { MAX_PARTITIONS, murmur2, partitionFor, type StreamEntry, type StreamSpec } from './stream-defs.js';
export * from './record-batch.js';
export { MAX_DECOMPRESSED_BYTES } from './compression.js';
export * from './properties.js';
export * from './sessions.js';
export * from './retained.js';
export * from './offsets.js';
export { ProducerIdAllocator } from './producer-ids.js';
export * from './store.js';
export { crc32c, crc32cCombine, crc32cJs, crc32cImplementation } from './crc32c.js';
export * from './histogram.js';
export { CoalescingTask } from './coalescing-task.js';
export * from './queues.js';
export * from './exchanges.js';
export * from './matcher.js';
export * from './namespaces.js';
export * from './links-config.js';
export { type LinkHost, type LinksOutcome, MAX_HOPS, NamespaceLinks, mapLevels, subjectCovers } from './links.js';
export * from './vhosts.js';
export { RouterCore } from './router.js';
export { isDeadLetterCycle, type RouterHost } from './routing.js';
export * from './queue.js';
export { MemoryQueueStore } from './memory-queue-store.js';
export * from './consumers.js';
export { TxnPartitions, type AbortedTxn } from './transactions.js';
