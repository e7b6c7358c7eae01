/**
 * What adapters do with a message storage could not take (a full disk, the free-space reserve, an I/O error):
 * they answer with their protocol's retriable error (Kafka KAFKA_STORAGE_ERROR, MQTT v5 PUBACK 0x97 / 0x80, MQTT
 * 3.1.1 a close) and log it as a storage condition, not as the client's fault. Producers keep retrying while the
 * disk is full, so those lines go through the adapter's LogLimiter (the MQTT hub's, the Kafka adapter's): a
 * bounded rate per client address, with a count of what was left out.
 */
import { isFlowError } from '../core/index.js';

/** 'full': no room (disk, quota or reserve), 'error': an I/O error; null: not a storage refusal. */
export function storageRefusal(err: unknown): 'full' | 'error' | null {
  if (isFlowError(err, 'STORAGE_FULL')) return 'full';
  if (isFlowError(err, 'STORAGE_ERROR')) return 'error';
  return null;
}
