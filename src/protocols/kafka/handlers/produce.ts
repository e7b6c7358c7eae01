/**
 * Produce: each partition's record batches are validated (CRC, structure, compression) and appended with
 * engine.produce, one call per batch, exactly as the client encoded them (the stored format is Kafka's
 * RecordBatch v2, so nothing is re-encoded; the log assigns the base offset in place).
 *
 * A partition is all-or-nothing: if any of its batches is refused, none is stored. With acks=0 no response is
 * sent at all (the client does not read one); with acks=1/-1 the response waits until every appended batch is
 * durable, which is FlowMQ's equivalent of "replicated to the in-sync replicas".
 *
 * In a cluster only the partition's leader (its owner) appends: elsewhere NOT_LEADER_OR_FOLLOWER, and the client
 * refreshes its metadata and goes to the leader (nothing is forwarded; see ../cluster.ts).
 */
import {
  ATTR_TRANSACTIONAL,
  decodeBatch,
  isCompressionSupported,
  readBatchInfo,
  setLogAppendTime,
  splitBatches,
  type StreamEntry,
} from '../../../core/index.js';
import {
  KafkaErrorCode,
  ZERO_UUID,
  type ProducePartitionData,
  type ProducePartitionResponse,
  type ProduceRequest,
  type ProduceResponse,
} from '../codec/index.js';
import { kafkaErrorCode } from '../errors.js';
import { CLOSE_CONNECTION, type HandlerResult, type RequestContext } from '../route.js';
import { batchProblem } from '../validate.js';
import { storageRefusal } from '../../storage-refusal.js';
import { allowed, mayCreateTopic, mayUseTransactionalId } from '../authz.js';
import { produceLimits } from '../topic-configs.js';
import { streamByTopicId } from '../topic-ids.js';
import { brokerList } from './metadata.js';

/** Records and bytes appended by one request: charged to the namespace's quota, counted in the client registry. */
interface Tally {
  records: number;
  bytes: number;
}

interface PartitionResult {
  res: ProducePartitionResponse;
  stream: string | null;
  durable: Promise<void> | null;
}

function result(index: number): PartitionResult {
  return {
    res: {
      index,
      errorCode: KafkaErrorCode.NONE,
      baseOffset: -1,
      logAppendTimeMs: -1,
      logStartOffset: -1,
      recordErrors: [],
      errorMessage: null,
    },
    stream: null,
    durable: null,
  };
}

function fail(r: PartitionResult, errorCode: number, message: string | null = null): void {
  r.res.errorCode = errorCode;
  r.res.errorMessage = message;
}

function append(ctx: RequestContext, stream: StreamEntry, p: ProducePartitionData, r: PartitionResult, tally: Tally): void {
  const name = stream.def.name;
  r.stream = name;
  if (p.index < 0 || p.index >= stream.def.partitions) {
    fail(r, KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION, `topic ${name} has no partition ${p.index}`);
    return;
  }
  // Cluster mode: only the partition's leader (its owner) appends; the client refreshes its metadata and goes there.
  const kc = ctx.adapter.cluster;
  if (kc !== null && kc.leads(name, p.index) === null) {
    fail(r, KafkaErrorCode.NOT_LEADER_OR_FOLLOWER, `broker ${kc.id} does not lead ${name}/${p.index}`);
    return;
  }
  if (p.records === null || p.records.length === 0) {
    fail(r, KafkaErrorCode.CORRUPT_MESSAGE, 'no record batch');
    return;
  }
  // Byte 16 of a batch (or of a v0/v1 message's header) is its magic: only RecordBatch v2 is stored. Produce
  // v0-2 clients send message sets v0/v1, which Kafka would convert; FlowMQ refuses them.
  if (p.records.length > 16 && p.records[16] !== 2) {
    fail(r, KafkaErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, `message format magic ${p.records[16]} is not supported; use RecordBatch v2`);
    return;
  }
  let batches: Buffer[];
  try {
    batches = splitBatches(p.records);
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    ctx.conn.limitedLog('warn', { topic: name, partition: p.index, reason: message }, 'produce refused: corrupt record batch');
    fail(r, KafkaErrorCode.CORRUPT_MESSAGE, message);
    return;
  }
  let records = 0;
  /** The producer of the transactional batches (KIP-98), -1 when none is. */
  let txnProducer = -1;
  for (let i = 0; i < batches.length; i++) {
    const info = readBatchInfo(batches[i]);
    records += info.recordCount;
    if ((info.attributes & ATTR_TRANSACTIONAL) !== 0) {
      // A transactional batch is appended only for the producer's current epoch, into a partition its open
      // transaction added (AddPartitionsToTxn): a fenced zombie gets INVALID_PRODUCER_EPOCH.
      const code = ctx.adapter.transactions.checkProduce(Number(info.producerId), info.producerEpoch, name, p.index);
      if (code !== KafkaErrorCode.NONE) {
        fail(r, code, `transactional batch of producer ${info.producerId} epoch ${info.producerEpoch} refused`);
        return;
      }
      txnProducer = Number(info.producerId);
    }
    if (!isCompressionSupported(info.compression)) {
      fail(r, KafkaErrorCode.UNSUPPORTED_COMPRESSION_TYPE, `compression codec ${info.compression} is not supported`);
      return;
    }
    const problem = batchProblem(batches[i], info);
    if (problem !== null) {
      ctx.conn.limitedLog('warn', { topic: name, partition: p.index, reason: problem }, 'produce refused: invalid record batch');
      // record_errors (KIP-467) name individual records; these problems concern the whole batch, so only the
      // error message carries them, as in Kafka.
      fail(r, KafkaErrorCode.CORRUPT_MESSAGE, `batch ${i}: ${problem}`);
      return;
    }
  }
  // The topic's max.message.bytes and message.timestamp.type (topic-configs.ts), as Kafka's LogValidator applies
  // them: a batch larger than the limit (log overhead included) is refused with MESSAGE_TOO_LARGE; with
  // LogAppendTime every batch is stamped with the time of its append (its CRC computed again).
  const limits = produceLimits(stream.def, ctx.adapter.brokerConfigs.produceDefaults);
  if (limits.maxMessageBytes !== null) {
    for (let i = 0; i < batches.length; i++) {
      if (batches[i].length > limits.maxMessageBytes) {
        fail(
          r,
          KafkaErrorCode.MESSAGE_TOO_LARGE,
          `batch ${i} of ${batches[i].length} bytes is larger than the topic's max.message.bytes (${limits.maxMessageBytes})`,
        );
        return;
      }
    }
  }
  if (limits.compacted === true) {
    // Kafka's LogValidator: a compacted topic cannot take a record without a key (the cleaner keeps the last record
    // of each key; a keyless one would have none), the whole batch is refused with INVALID_RECORD.
    for (let i = 0; i < batches.length; i++) {
      if ((batches[i].readInt16BE(21) & 0x20) !== 0) continue; // a control batch (transaction marker) has its own key
      if (decodeBatch(batches[i]).some((rec) => rec.key === null)) {
        fail(r, KafkaErrorCode.INVALID_RECORD, `batch ${i}: compacted topic ${name} cannot take a record without a key`);
        return;
      }
    }
  }
  if (limits.logAppendTime) {
    const now = Date.now();
    for (const b of batches) setLogAppendTime(b, now);
    r.res.logAppendTimeMs = now;
  }
  const durables: Promise<void>[] = [];
  try {
    for (let i = 0; i < batches.length; i++) {
      const res = ctx.adapter.engine.produce(name, p.index, batches[i]);
      if (i === 0) r.res.baseOffset = res.baseOffset;
      // The transaction's first record here holds the partition's last stable offset until its marker.
      if (txnProducer >= 0) ctx.adapter.transactions.partitions.onAppend(name, p.index, txnProducer, res.baseOffset);
      durables.push(res.durable);
    }
  } catch (err) {
    if (storageRefusal(err) !== null) {
      // A full disk or a partition backing off after a failed write: the producer retries (KAFKA_STORAGE_ERROR).
      ctx.conn.limitedLog('warn', { topic: name, partition: p.index, err: (err as Error).message }, 'produce refused: storage cannot take it now');
    } else ctx.conn.log.warn({ err, topic: name, partition: p.index }, 'produce failed');
    fail(r, kafkaErrorCode(err), err instanceof Error ? err.message : null);
  }
  if (r.res.errorCode === KafkaErrorCode.NONE) {
    tally.records += records;
    tally.bytes += p.records.length;
  }
  if (durables.length > 0) r.durable = durables.length === 1 ? durables[0] : Promise.all(durables).then(() => undefined);
}

export function handleProduce(ctx: RequestContext, req: ProduceRequest): HandlerResult<ProduceResponse> | Promise<HandlerResult<ProduceResponse>> {
  const { adapter } = ctx;
  const started = performance.now();
  const validAcks = req.acks === 0 || req.acks === 1 || req.acks === -1;
  const results: PartitionResult[][] = [];
  const deferred: Promise<void>[] = [];
  const tally: Tally = { records: 0, bytes: 0 };
  const byId = ctx.header.apiVersion >= 13;
  // A transactional producer's records need its transactional id (Kafka's WRITE on it) besides each topic.
  const txnDenied = req.transactionalId !== null && !mayUseTransactionalId(ctx, req.transactionalId);
  /** Why the namespace takes no writes now (its storage quota), asked once per request when a topic gets there. */
  let storageFull: string | null | undefined;
  for (const t of req.topics) {
    const rs = t.partitions.map((p) => result(p.index));
    results.push(rs);
    if (!validAcks) {
      for (const r of rs) fail(r, KafkaErrorCode.INVALID_REQUIRED_ACKS, `acks must be 0, 1 or -1, not ${req.acks}`);
      continue;
    }
    if (txnDenied) {
      for (const r of rs) fail(r, KafkaErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, `not authorized to use transactional id "${req.transactionalId}"`);
      continue;
    }
    if (byId) {
      // v13+ (KIP-516): the topic by its id; an id no stream has now (deleted, re-created, never made) is
      // UNKNOWN_TOPIC_ID, and nothing is auto-created by id.
      const entry = streamByTopicId(adapter.engine, t.topicId ?? ZERO_UUID);
      if (entry === undefined) {
        for (const r of rs) fail(r, KafkaErrorCode.UNKNOWN_TOPIC_ID);
        continue;
      }
      t.name = entry.def.name;
    }
    if (!allowed(ctx, 'publish', 'stream', t.name)) {
      for (const r of rs) fail(r, KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED, `not authorized to produce to topic "${t.name}"`);
      continue;
    }
    // The namespace's storage quota (maxStorageBytes): over it, nothing is appended until retention or deletion
    // frees room; POLICY_VIOLATION (not retriable) tells the producer at once instead of retrying into it.
    if (storageFull === undefined) storageFull = ctx.conn.quota?.storageFull() ?? null;
    if (storageFull !== null) {
      for (const r of rs) fail(r, KafkaErrorCode.POLICY_VIOLATION, storageFull);
      continue;
    }
    const found = adapter.lookup(t.name);
    if (found.entry) {
      // Existing topic: append now, synchronously, so pipelined produces keep their order.
      const entry = found.entry;
      t.partitions.forEach((p, i) => append(ctx, entry, p, rs[i], tally));
    } else if (adapter.wouldCreate(t.name) && !mayCreateTopic(ctx, t.name)) {
      // As Kafka answers a topic it would auto-create for a client not allowed to create it.
      for (const r of rs) fail(r, KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED, `not authorized to create topic "${t.name}"`);
    } else if (adapter.wouldCreate(t.name)) {
      deferred.push(
        adapter.resolve(t.name, true).then((res) => {
          if (res.entry) {
            const entry = res.entry;
            t.partitions.forEach((p, i) => append(ctx, entry, p, rs[i], tally));
          } else for (const r of rs) fail(r, res.errorCode);
        }),
      );
    } else {
      for (const r of rs) fail(r, found.errorCode);
    }
  }
  const finish = (): HandlerResult<ProduceResponse> | Promise<HandlerResult<ProduceResponse>> => {
    // The namespace's publish and bytes-in rates: how long this client is held back (KIP-219).
    let throttleMs = 0;
    if (tally.records > 0) {
      if (ctx.conn.client) ctx.conn.client.messagesIn += tally.records;
      throttleMs = ctx.conn.quota?.chargeIn(tally.records, tally.bytes) ?? 0;
    }
    if (req.acks === 0) {
      ctx.conn.throttle(throttleMs);
      // Nobody waits for these; a failure must still be observed (and logged), never left unhandled.
      const pending: Promise<void>[] = [];
      for (const rs of results) {
        for (const r of rs) {
          if (r.durable) {
            pending.push(
              r.durable.catch((err: unknown) => {
                if (storageRefusal(err) !== null) {
                  ctx.conn.limitedLog('warn', { topic: r.stream, err: (err as Error).message }, 'acks=0 produce failed: storage write failed');
                } else ctx.conn.log.error({ err, topic: r.stream }, 'acks=0 append failed');
              }),
            );
          }
        }
      }
      // With acks=0 the client reads no response, so an error can only be signalled the way Kafka does it:
      // by closing the connection, which makes the producer refresh its metadata and reconnect.
      const failed = results.flat().find((r) => r.res.errorCode !== KafkaErrorCode.NONE);
      if (failed) {
        ctx.conn.limitedLog('info', { errorCode: failed.res.errorCode, partition: failed.res.index }, 'acks=0 produce failed: closing connection');
        return CLOSE_CONNECTION;
      }
      // The request still counts as unanswered until its data is stored (acknowledged, as far as the log is
      // concerned): a connection with too many of them stops reading, so a producer that does not wait for
      // acks is held to what the log takes, like one that does, instead of filling the broker's memory.
      return pending.length === 0 ? null : Promise.all(pending).then(() => null);
    }
    return respond(ctx, req, results, byId).then((res) => {
      // The broker's own share of produce latency: request decoded → response ready (durable).
      adapter.produceLatency.record(performance.now() - started);
      // The response tells the client how long it is throttled, and the connection is muted for that long.
      res.throttleTimeMs = throttleMs;
      ctx.conn.throttle(throttleMs);
      return res;
    });
  };
  return deferred.length === 0 ? finish() : Promise.all(deferred).then(finish);
}

async function respond(ctx: RequestContext, req: ProduceRequest, results: PartitionResult[][], byId: boolean): Promise<ProduceResponse> {
  const waits: Promise<void>[] = [];
  for (const rs of results) {
    for (const r of rs) {
      if (!r.durable) continue;
      waits.push(
        r.durable.then(
          () => undefined,
          (err: unknown) => {
            if (storageRefusal(err) !== null) {
              ctx.conn.limitedLog('warn', { topic: r.stream, partition: r.res.index, err: (err as Error).message }, 'produce failed: storage write failed');
            } else ctx.conn.log.error({ err, topic: r.stream, partition: r.res.index }, 'append did not become durable');
            // An unexpected failure here happened in storage: KAFKA_STORAGE_ERROR is retriable for the client.
            const code = kafkaErrorCode(err);
            if (r.res.errorCode === KafkaErrorCode.NONE) {
              fail(r, code === KafkaErrorCode.UNKNOWN_SERVER_ERROR ? KafkaErrorCode.KAFKA_STORAGE_ERROR : code);
            }
          },
        ),
      );
    }
  }
  if (waits.length > 0) await Promise.all(waits);
  // A partition refused because another broker leads it names that broker (v10+, KIP-951).
  const kc = ctx.adapter.cluster;
  const leaders = new Set<number>();
  if (kc !== null) {
    for (const r of results.flat()) {
      if (r.res.errorCode !== KafkaErrorCode.NOT_LEADER_OR_FOLLOWER || r.stream === null) continue;
      const leader = kc.leader(r.stream, r.res.index);
      if (leader === null) continue;
      r.res.currentLeader = { leaderId: leader.id, leaderEpoch: leader.epoch };
      leaders.add(leader.id);
    }
  }
  return {
    nodeEndpoints: leaders.size > 0 ? brokerList(ctx).brokers.filter((b) => leaders.has(b.nodeId)) : [],
    topics: req.topics.map((t, ti) => ({
      name: byId ? '' : t.name,
      topicId: t.topicId ?? ZERO_UUID,
      partitions: results[ti].map((r) => {
        if (r.res.errorCode === KafkaErrorCode.NONE && r.stream !== null) {
          try {
            r.res.logStartOffset = ctx.adapter.engine.offsets(r.stream, r.res.index).logStartOffset;
          } catch {
            // The stream was deleted meanwhile: the append itself succeeded, -1 says "unknown".
          }
        }
        return r.res;
      }),
    })),
    throttleTimeMs: 0,
  };
}
