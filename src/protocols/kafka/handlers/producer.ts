/**
 * InitProducerId (KIP-98): hands an idempotent producer a producer id that no other producer ever had, even
 * across restarts (ids are reserved in blocks from the core's ProducerIdStore, the metastore in a broker), with
 * epoch 0. Per-partition sequence checks happen where batches are appended (the log engine).
 *
 * For a producer without transactional id Kafka always allocates a new id, also when the request names its
 * current id and epoch (KIP-360); so does FlowMQ. A transactional id goes to the transaction coordinator
 * (../transactions/coordinator.ts): a stable producer id per transactional id, its epoch bumped by every
 * initialization, which fences the previous incarnation. In cluster mode it is served by the id's coordinator only
 * (NOT_COORDINATOR elsewhere; see txnGated). A principal not allowed `publish transactional-id:<id>` (Kafka's WRITE
 * on the TRANSACTIONAL_ID) gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as from Kafka.
 */
import { KafkaErrorCode, type InitProducerIdRequest, type InitProducerIdResponse } from '../codec/index.js';
import { kafkaErrorCode } from '../errors.js';
import type { RequestContext } from '../route.js';
import { mayUseTransactionalId } from '../authz.js';
import { txnGated } from './transactions.js';

export async function handleInitProducerId(ctx: RequestContext, req: InitProducerIdRequest): Promise<InitProducerIdResponse> {
  const res = { throttleTimeMs: 0, errorCode: KafkaErrorCode.NONE as number, producerId: -1, producerEpoch: -1 };
  if (req.transactionalId !== null) {
    if (!mayUseTransactionalId(ctx, req.transactionalId)) {
      res.errorCode = KafkaErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
      return res;
    }
    const transactionalId = req.transactionalId;
    try {
      const out = await txnGated(
        ctx,
        transactionalId,
        (errorCode) => ({ errorCode, producerId: -1, producerEpoch: -1 }),
        () =>
          ctx.adapter.transactions.initProducerId(
            transactionalId,
            req.transactionTimeoutMs,
            { producerId: req.producerId, producerEpoch: req.producerEpoch },
            ctx.header.apiVersion,
          ),
      );
      return { ...res, ...out };
    } catch (err) {
      ctx.conn.log.warn({ err, transactionalId: req.transactionalId }, 'transactional producer initialization failed');
      res.errorCode = KafkaErrorCode.COORDINATOR_NOT_AVAILABLE;
      return res;
    }
  }
  try {
    res.producerId = await ctx.adapter.producerIdAllocator.allocate();
    res.producerEpoch = 0;
    ctx.conn.log.debug({ producerId: res.producerId }, 'producer id allocated');
  } catch (err) {
    ctx.conn.log.warn({ err }, 'producer id allocation failed');
    // Retriable for the client: it will ask again.
    res.errorCode = kafkaErrorCode(err) === KafkaErrorCode.KAFKA_STORAGE_ERROR ? KafkaErrorCode.COORDINATOR_NOT_AVAILABLE : kafkaErrorCode(err);
  }
  return res;
}
