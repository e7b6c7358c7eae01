/**
 * /jsz of the NATS monitoring port (nats-server 2.9.10's JSInfo, server/monitor.go): the JetStream summary over
 * FlowMQ streams, and with `accounts`, `streams`, `consumers`, `config` the one account's details. Every FlowMQ
 * stream is a JetStream stream (also one a Kafka client made), all in nats-server's global account `$G` (FlowMQ's
 * namespaces do not isolate stream names). Bytes are counted as nats-server counts them (account.ts bytesOf); /varz's
 * `jetstream.stats` reports 0 for them (it is answered without reading the streams).
 */
import type { JetStreamState, Json } from './service-state.js';
import { consumerInfoJson } from './consumer-api.js';
import { streamInfoJson } from './stream-api.js';
import { streamBytes } from './account.js';
import { jsOptions } from './stream-view.js';

/** Streams, and consumers per stream, detailed in one /jsz answer (nats-server lists all of them). */
export const MAX_JSZ_DETAIL = 1024;

export interface JszOptions {
  accounts: boolean;
  streams: boolean;
  consumers: boolean;
  config: boolean;
  /** `acc`: an account name; only `$G` exists. */
  account: string;
}

/** The JetStream config and stats as /varz's `jetstream` and the head of /jsz show them. */
export function jetstreamStats(js: JetStreamState): { config: Json; stats: Json } {
  return {
    // FlowMQ sets no JetStream memory or storage limit (-1, as JetStream's account limits say "none").
    config: { max_memory: -1, max_storage: -1 },
    stats: {
      memory: 0,
      storage: 0,
      reserved_memory: 0,
      reserved_storage: 0,
      accounts: 1,
      ha_assets: 0,
      api: { total: js.api.total, errors: js.api.errors },
    },
  };
}

export async function jsz(js: JetStreamState, serverId: string, o: JszOptions): Promise<Json> {
  const { config, stats } = jetstreamStats(js);
  // The account `$G` is `default`'s streams (a tenant's are its own account's, not listed here yet).
  const defs = js.engine.listStreams().sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  let messages = 0;
  let memory = 0;
  let storage = 0;
  for (const d of defs) {
    const bytes = await streamBytes(js, d);
    if (jsOptions(d).memory) memory += bytes;
    else storage += bytes;
    for (let p = 0; p < d.partitions; p++) {
      const off = js.engine.offsets(d.name, p);
      messages += off.highWatermark - off.logStartOffset;
    }
  }
  const out: Json = {
    server_id: serverId,
    now: new Date().toISOString(),
    config,
    ...stats,
    memory,
    storage,
    streams: defs.length,
    consumers: js.consumerCount(),
    messages,
    bytes: memory + storage,
  };
  const streams = o.streams || o.consumers;
  const accounts = o.accounts || streams || o.account !== '';
  if (!accounts || (o.account !== '' && o.account !== '$G')) return out;
  // nats-server's account detail counts no accounts of its own.
  const detail: Json = { name: '$G', id: '$G', ...stats, memory, storage, accounts: 0 };
  if (streams) {
    const list: Json[] = [];
    for (const d of defs.slice(0, MAX_JSZ_DETAIL)) {
      const info = await streamInfoJson(js, d);
      const sd: Json = { name: d.name, created: info.created };
      if (o.config) sd.config = info.config;
      sd.state = info.state;
      if (o.consumers) {
        const cs = js.sortedConsumers(d.name).slice(0, MAX_JSZ_DETAIL);
        if (cs.length > 0) {
          sd.consumer_detail = cs.map((c) => {
            const ci = consumerInfoJson(c);
            if (!o.config) delete ci.config;
            return ci;
          });
        }
      }
      list.push(sd);
    }
    if (list.length > 0) detail.stream_detail = list;
  }
  out.account_details = [detail];
  return out;
}
