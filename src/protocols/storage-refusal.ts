/**
 * What adapters do with a message storage could not take (a full disk, the free-space reserve, an I/O error, a
 * partition fenced because another broker owns it now): they answer with their protocol's retriable error (Kafka
 * KAFKA_STORAGE_ERROR, or NOT_LEADER_OR_FOLLOWER for a fenced partition, which makes clients refresh their
 * metadata; MQTT v5 PUBACK 0x97 / 0x80, MQTT 3.1.1 a close) and log it as a storage condition, not as the
 * client's fault. Producers keep retrying while the
 * disk is full, so those lines go through the adapter's LogLimiter (the MQTT hub's, the Kafka adapter's): a
 * bounded rate per client address, with a count of what was left out.
 */
import { isFlowError } from '../core/index.js';

/**
 * 'full': no room (disk, quota or reserve), 'error': an I/O error, 'fenced': the partition has another owner now
 * (FENCED: this broker takes no more writes for it); null: not a storage refusal.
 */
export function storageRefusal(err: unknown): 'full' | 'error' | 'fenced' | null {
  if (isFlowError(err, 'STORAGE_FULL')) return 'full';
  if (isFlowError(err, 'STORAGE_ERROR')) return 'error';
  if (isFlowError(err, 'FENCED')) return 'fenced';
  return null;
}
