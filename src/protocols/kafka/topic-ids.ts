/**
 * Kafka topic ids (KIP-516) are the streams' ids (StreamDef.id: 32 hex digits, made when the stream is created, kept
 * by the metastore, new when a topic is deleted and created again).
 */
import type { StreamDef, StreamEntry, Engine } from '../../core/index.js';
import { ZERO_UUID, type Uuid } from './codec/index.js';

/** A stream's topic id; ZERO_UUID for a definition without one (made by hand, outside the engine). */
export function topicIdOf(def: StreamDef): Uuid {
  return def.id !== undefined ? Buffer.from(def.id, 'hex') : ZERO_UUID;
}

/** A topic id as StreamDef.id writes it. */
export function topicIdHex(id: Uuid): string {
  return id.toString('hex');
}

/** The stream a topic id names now; undefined for ZERO_UUID, a deleted topic's id, or one never made. */
export function streamByTopicId(engine: Engine, id: Uuid): StreamEntry | undefined {
  if (id.equals(ZERO_UUID)) return undefined;
  return engine.getAnyStreamById(topicIdHex(id));
}
