/**
 * The JetStream API over FlowMQ streams: a subscriber on the core that answers `$JS.API.>` requests and
 * `$JS.ACK.>` acknowledgements the way nats-server 2.9 does, so the `nats` client's JetStream API (jsm.streams,
 * js.publish, consumers.get/fetch/consume) works on FlowMQ streams.
 *
 * Requests and acks travel through the core like any message: the service subscribes with the NATS rule and
 * answers with engine.publish to the request's response topic, so they work the same whichever listener or broker
 * the client is on. A JetStream stream is a FlowMQ stream (its subjects are its bindings); consumers are pull and
 * push consumers on streams of one partition or several (partition-seq.ts numbers the latter), their state in the
 * metastore's ConsumerStateStore (engine.store).
 *
 * JetStream publishes (a NATS publish with a reply subject) come through `publish`, called by the NATS connection:
 * duplicate detection by Nats-Msg-Id within the stream's duplicate window (kept in memory, rebuilt at start from
 * the stream's recent records: dedup.ts), then the core's publish, then a PubAck to the reply subject once every capturing stream has the message
 * durably.
 *
 * The API is split as nats-server's is (see service-state.ts): this file is the subscriber, the authorization of
 * each request and its dispatch (jetstream_api.go); stream-api.ts, message-api.ts and consumer-api.ts serve the
 * requests, service-cluster.ts adds cluster mode.
 */
import type { Access, Action, ConsumerGroupAdmin, ResourceKind } from '../../../control/index.js';
import {
  DEFAULT_NAMESPACE,
  dotsToUnified,
  isReservedTopic,
  makeMessage,
  namespaceNames,
  NS_PREFIX,
  splitTopic,
  type Engine,
  type Message,
  type NamespaceNames,
  type PublishInfo,
  type Subscriber,
  type Subscription,
} from '../../../core/index.js';
import type { ConsumerConfig } from './config.js';
import { Consumer } from './consumer.js';
import { JsErr } from './errors.js';
import { levelsToTokens } from './subjects.js';
import { BAD_JSON, errText, JetStreamState, type Json, NO_ANSWER, parseJson, typed } from './service-state.js';
import { directServer, streamCreate, streamDelete, streamInfo, streamList, streamNames, streamPurge, streamUpdate } from './stream-api.js';
import { accountInfo, accountLimits, checkAccounts, consumerLimitCheck, jetstreamEnabled, namespaceOf, notEnabledAnswer } from './account.js';
import { directGet, msgDelete, msgGet, publishWith, storedTopic } from './message-api.js';
import { consumerCreate, groupAdmin, consumerDelete, consumerInfoReq, consumerList, consumerNames, onAck, pullRequest } from './consumer-api.js';
import { joinCluster, routeConsumer, routeStream } from './service-cluster.js';
import { ownStream, qualifyAckLevels, qualifyApi } from './names.js';

const DEFAULT_NAMES = namespaceNames(DEFAULT_NAMESPACE);
import { rebuildWindows } from './dedup.js';

export { MAX_CONSUMERS, type JetStreamAuthorizer, type JetStreamOptions } from './service-state.js';

/**
 * What the NATS connection calls for a publish with a reply subject (adapter.ts's NatsPublisher): `reply` is the
 * reply's unified topic (also in msg.responseTopic).
 */
export interface JetStreamPublisher {
  publish(msg: Message, reply: string): PublishInfo;
}

/** One condition of a JetStream API request: one of `actions` on the resource. */
interface ApiCheck {
  actions: readonly Action[];
  kind: ResourceKind;
  name: string;
}

export class JetStream extends JetStreamState implements Subscriber, JetStreamPublisher {
  private accountTimer: NodeJS.Timeout | null = null;
  private accountCheck: Promise<void> | null = null;
  /** Loads the stored consumers (durable and, on a single broker, ephemeral: stores()), then answers the API. */
  async start(): Promise<void> {
    if (this.cluster !== null) joinCluster(this, this.cluster);
    let recs: Awaited<ReturnType<Engine['store']['listConsumers']>> = [];
    try {
      // Cluster mode: no broker loads every consumer; each is loaded by the broker that acquires it.
      if (this.cluster === null) recs = await this.engine.store.listConsumers();
    } catch (err) {
      this.warnStore(err);
    }
    for (const r of recs) {
      const def = this.engine.getAnyStream(r.stream);
      if (!def) continue;
      let config: ConsumerConfig;
      try {
        config = JSON.parse(r.config) as ConsumerConfig;
      } catch {
        this.logger.warn({ stream: r.stream, consumer: r.name }, 'JetStream consumer with unreadable config skipped');
        continue;
      }
      // Ephemeral ones are stored too (stores()): one without a durable name is loaded as ephemeral again.
      const durable = typeof config.durable_name === 'string' && config.durable_name !== '';
      this.add(new Consumer(this, r.stream, r.name, config, r.createdAt, durable, r));
    }
    // This broker's clients only (`local`): in cluster mode every broker answers its own clients' requests and
    // forwards what another broker serves (see cluster.ts), so requests are never answered twice.
    // Views known from the start: JetStream publishes to their streams are tracked from the first one on.
    for (const d of this.engine.listAllStreams()) this.viewOf(d.name);
    // Duplicate windows: their lengths, and the ids still inside them (dedup.ts), before any publish is taken.
    try {
      const ids = await rebuildWindows(this);
      if (ids > 0) this.logger.debug({ ids }, 'JetStream duplicate windows rebuilt');
    } catch (err) {
      this.logger.warn({ err }, 'JetStream duplicate windows not rebuilt');
    }
    this.refreshGuards();
    this.syncSources();
    // Switched off (--nats-jetstream false): nothing answers the API, as on a nats-server without JetStream.
    if (this.enabled) {
      // Every namespace's API (a NATS account's own `$JS.API.>` is `$ns/<ns>/$JS/API/...` in the core, names.ts):
      // `default`'s as NATS subjects, the others' through one MQTT filter per subject (its `+` is the namespace).
      const sub = (subject: string): void => {
        this.subs.push(this.engine.subscribe(subject, this, { qos: 0, rule: 'nats', local: true }));
        this.subs.push(this.engine.subscribe(`${NS_PREFIX}+/${dotsToUnified(subject.slice(0, -2))}/#`, this, { qos: 0, rule: 'mqtt', local: true }));
      };
      sub('$JS.API.>');
      // A domain's API subjects: the same API (nats-server's $JS.<domain>.API.> mapping onto $JS.API.>).
      if (this.domain !== null) sub(`$JS.${this.domain}.API.>`);
      sub('$JS.ACK.>');
      // Answers to push consumers' flow-control requests (consumer.ts; a single broker only).
      if (this.cluster === null) sub('$JS.FC.>');
    }
    this.ticker = setInterval(() => this.tick(), this.tickMs);
    this.ticker.unref();
    // The accounts' storage usage (account.ts), for their limits on publish: once a second, one run at a time.
    this.accountTimer = setInterval(() => {
      if (this.accountCheck === null && !this.closed) void this.countAccounts();
    }, 1000);
    this.accountTimer.unref();
  }

  /** Counts the accounts' usage again (account.ts checkAccounts), after a run under way. */
  private async countAccounts(): Promise<void> {
    while (this.accountCheck !== null) await this.accountCheck;
    this.accountCheck = checkAccounts(this)
      .catch((err: unknown) => {
        this.logLimit.log('warn', 'jetstream-accounts', { err }, 'JetStream account usage not counted');
      })
      .finally(() => (this.accountCheck = null));
    await this.accountCheck;
  }

  /** Stops answering and writes every consumer's state. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const s of this.subs) this.engine.unsubscribe(s);
    this.subs.length = 0;
    if (this.ticker) clearInterval(this.ticker);
    if (this.accountTimer) clearInterval(this.accountTimer);
    await this.accountCheck;
    this.syncSources();
    this.logLimit.stop();
    for (const m of this.consumers.values()) for (const c of m.values()) c.close(false);
    this.flush();
    await Promise.all([...this.writes]);
  }

  /** Durable consumers as consumer groups for the admin API (consumer-api.ts). */
  groupAdmin(): ConsumerGroupAdmin {
    return groupAdmin(this);
  }

  /** Figures for /api/v1/broker. */
  figures(): Json {
    let consumers = 0;
    for (const m of this.consumers.values()) consumers += m.size;
    return {
      apiRequests: this.api.total,
      apiErrors: this.api.errors,
      apiDenied: this.api.denied,
      consumers,
      ...(this.cluster !== null ? { cluster: { ...this.clusterStats } } : {}),
    };
  }

  /** A JetStream publish (message-api.ts): the PubAck, or the error, goes to `reply`. */
  publish(msg: Message, reply: string): PublishInfo {
    return publishWith(this, msg, msg.responseTopic ?? reply);
  }

  deliver(msg: Message, _subs: Subscription[]): void {
    if (this.closed) return;
    // The payload may be a view into a socket buffer: read it now.
    const body = msg.payload.toString('utf8');
    // The request's namespace (NATS account) is its topic's: `$ns/<ns>/$JS/...` (the core lets only a message of
    // that namespace publish there), `$JS/...` for `default`.
    let names = DEFAULT_NAMES;
    let levels: string[];
    if (isReservedTopic(msg.topic)) {
      const { namespace, topic } = splitTopic(msg.topic);
      names = namespaceNames(namespace);
      levels = topic.split('/');
    } else levels = msg.topic.split('/');
    // Who asks, looked up now: the connection may close while the request is served.
    let access: Access | null = null;
    if (this.authorizer !== null) {
      const a = this.authorizer.accessOf(msg.origin);
      if (a === 'gone') return;
      if (a !== null && !a.open) access = a;
    }
    if (levels[1] === 'ACK' || levels[1] === 'FC') {
      const q = qualifyAckLevels(names, levels);
      if (q === null) return;
      levels = q;
    }
    if (levels[1] === 'ACK') {
      // $JS/ACK/<stream>/<consumer>/...: acknowledging moves the consumer, as consuming does.
      if (access !== null && levels.length >= 4) {
        const t = levelsToTokens(levels.slice(2, 4));
        if (this.denied(access, [{ actions: ['subscribe'], kind: 'group', name: t[1] }]) !== null) return;
      }
      onAck(this, levels, body, msg.responseTopic);
      return;
    }
    if (levels[1] === 'FC') {
      // $JS/FC/<stream>/<consumer>/<id>: a push consumer's flow-control request answered.
      if (levels.length !== 5) return;
      const t = levelsToTokens(levels);
      if (access !== null && this.denied(access, [{ actions: ['subscribe'], kind: 'group', name: t[3] }]) !== null) return;
      this.getConsumer(t[2], t[3])?.flowAnswer(t.join('.'));
      return;
    }
    const reply = msg.responseTopic;
    if (reply === undefined) return;
    // A namespace that imports this API subject as a service (src/core/links.ts: nats.js's `$JS.API.>` of another
    // account) is answered by the exporter only, as on nats-server; what crossed a link is the exporter's own request.
    const links = this.engine.links;
    if (links.size > 0 && msg.origin?.startsWith('link:') !== true && links.shadows(msg.topic)) return;
    const tokens = levelsToTokens(levels.slice(this.domain !== null && levels[1] === this.domain && levels[2] === 'API' ? 3 : 2));
    void this.onApi(tokens, body, reply, access, names);
  }

  /**
   * What a request needs, by the design's mapping: streams are created, altered (UPDATE), described (INFO, and
   * listed), deleted (DELETE, PURGE, MSG.DELETE) and read (MSG.GET: subscribe); a consumer is created and pulled
   * from with `subscribe` on its stream and on its name as a group, described with `describe` or `subscribe`, and
   * deleted with `delete group:`. STREAM.NAMES/LIST are filtered instead (see listable).
   */
  private checksFor(t: string[], body: string): ApiCheck[] {
    const [a, b, c] = t;
    const stream = (actions: readonly Action[], name: string | undefined): ApiCheck[] => (name === undefined ? [] : [{ actions, kind: 'stream', name }]);
    const group = (actions: readonly Action[], name: string | undefined): ApiCheck[] =>
      name === undefined || name === '' ? [] : [{ actions, kind: 'group', name }];
    const read: readonly Action[] = ['subscribe', 'describe'];
    if (a === 'STREAM') {
      if (b === 'CREATE') return stream(['create'], c);
      if (b === 'UPDATE') return stream(['alter'], c);
      if (b === 'INFO') return stream(['describe'], c);
      if (b === 'DELETE' || b === 'PURGE') return stream(['delete'], c);
      if (b === 'MSG' && c === 'GET') return stream(['subscribe'], t[3]);
      if (b === 'MSG' && c === 'DELETE') return stream(['delete'], t[3]);
      return [];
    }
    // Read from the stream that answers: the one asked, or a mirror of it with mirror_direct.
    if (a === 'DIRECT' && b === 'GET') return stream(['subscribe'], c === undefined ? c : directServer(this, c));
    if (a === 'CONSUMER') {
      if (b === 'DURABLE' && c === 'CREATE') return [...stream(['subscribe'], t[3]), ...group(['subscribe'], t[4])];
      if (b === 'CREATE') {
        // The name is in the subject (2.9 clients) or only in the body (an ephemeral consumer may carry one).
        let name: string | undefined = t[3];
        if (name === undefined) {
          const raw = parseJson(body);
          const cfg = raw !== BAD_JSON && raw !== null && typeof raw === 'object' ? ((raw as Json).config as Json | undefined) : undefined;
          const n = cfg && typeof cfg === 'object' ? (cfg.durable_name ?? cfg.name) : undefined;
          if (typeof n === 'string') name = n;
        }
        return [...stream(['subscribe'], c), ...group(['subscribe'], name)];
      }
      if (b === 'NAMES' || b === 'LIST') return stream(read, c);
      if (b === 'INFO') return [...stream(read, c), ...group(read, t[3])];
      if (b === 'DELETE') return group(['delete'], t[3]);
      if (b === 'MSG' && c === 'NEXT') return [...stream(['subscribe'], t[3]), ...group(['subscribe'], t[4])];
    }
    return [];
  }

  /** The first check `access` fails (its denial logged), or null when all pass. */
  private denied(access: Access, checks: ApiCheck[]): ApiCheck | null {
    const control = this.authorizer!.control;
    const p = access.principal;
    for (const ch of checks) {
      if (ch.actions.some((act) => control.allows(p, act, ch.kind, ch.name))) continue;
      this.authorizer!.control.logDenial(access, ch.actions[0]!, ch.kind, ch.name);
      this.api.denied++;
      return ch;
    }
    return null;
  }

  private async onApi(asked: string[], body: string, reply: string, access: Access | null, names: NamespaceNames): Promise<void> {
    this.api.total++;
    // An account without JetStream (account.ts jetstreamEnabled) gets nats-server's 10039 from every API, whatever
    // it names: its permissions or streams are never looked at.
    if (!jetstreamEnabled(this, names.namespace)) {
      const off = notEnabledAnswer(asked);
      if (off === null) return;
      this.api.errors++;
      this.reply(reply, off);
      return;
    }
    let out: Json;
    // The stream the request names, inside the namespace (names.ts); a qualified name written by a client is none.
    const qualified = qualifyApi(names, asked);
    const t = qualified ?? asked;
    try {
      // Policies name streams as the namespace's clients write them.
      const checks = access === null ? [] : this.checksFor(t, body).map((ch) => (ch.kind === 'stream' ? { ...ch, name: ownStream(ch.name) } : ch));
      const refused = access === null ? null : this.denied(access, checks);
      if (refused !== null) {
        const user = access!.principal.user;
        const text = `Permissions Violation for ${refused.actions[0]} on ${refused.kind} ${JSON.stringify(refused.name)}${user === null ? '' : ` for user ${JSON.stringify(user)}`}`;
        // A pull request is answered with a status on its inbox, never JSON (400: nats.js ends the fetch with it).
        if (t[0] === 'CONSUMER' && t[1] === 'MSG') {
          this.send(makeMessage(reply, Buffer.alloc(0), { status: `400 ${text}` }));
          return;
        }
        out = { error: JsErr.accessDenied(text) };
      } else if (qualified === null) {
        // As for a stream nobody has: a pull request or direct get gets nobody's answer.
        if ((t[0] === 'CONSUMER' && t[1] === 'MSG') || t[0] === 'DIRECT') {
          this.send(makeMessage(reply, Buffer.alloc(0), { status: '503' }));
          return;
        }
        out = { error: JsErr.streamNotFound() };
      } else out = await this.route(t, body, reply, access, names.namespace);
    } catch (err) {
      this.logLimit.log('warn', `jetstream-api|${t[0]}.${t[1] ?? ''}`, { err, request: t.join('.') }, 'JetStream API request failed');
      out = { error: JsErr.streamGeneral(errText(err)) };
    }
    if (out === NO_ANSWER) return;
    if (out.error !== undefined) this.api.errors++;
    const stored = t[0] === 'STREAM' && t[1] === 'MSG' && t[2] === 'GET' ? storedTopic(out) : undefined;
    this.reply(reply, out, stored === undefined ? undefined : names.topic(stored));
  }

  private async route(t: string[], body: string, reply: string, access: Access | null, namespace: string): Promise<Json> {
    if (t[0] === 'CONSUMER' && (t[1] === 'CREATE' || (t[1] === 'DURABLE' && t[2] === 'CREATE'))) {
      // The account's consumer limits, checked where the request arrives (also before a cluster forward).
      const checked = consumerLimitCheck(this, accountLimits(this, namespace), t, body);
      if ('error' in checked) return typed('consumer_create_response', { error: checked.error });
      body = checked.body;
    }
    const cl = this.cluster;
    if (cl !== null && t[0] === 'CONSUMER') {
      if ((t[1] === 'NAMES' || t[1] === 'LIST') && t.length === 3) return this.routeLocal(t, body, reply, undefined, access);
      if (t[1] === 'MSG') {
        try {
          return await routeConsumer(this, cl, t, body, reply);
        } catch (err) {
          // A pull request is answered with a status, never JSON: nobody could serve it now.
          this.logLimit.log(
            'warn',
            `jetstream-forward|${t.join('.')}`,
            { err, request: t.join('.') },
            "JetStream pull request could not reach the consumer's owner",
          );
          this.sendLocal(makeMessage(reply, Buffer.alloc(0), { status: '503' }));
          return NO_ANSWER;
        }
      }
      return routeConsumer(this, cl, t, body, reply);
    }
    if (cl !== null && t[0] === 'STREAM' && ((t[1] === 'INFO' && t.length === 3) || (t[1] === 'MSG' && t[2] === 'GET' && t.length === 4))) {
      const out = await routeStream(this, cl, t, body, reply);
      if (out !== null) return out;
    }
    return this.routeLocal(t, body, reply, undefined, access, namespace);
  }

  /** Serves a request here. `origin`: the broker a consumer request came from (cluster mode). */
  async routeLocal(
    t: string[],
    body: string,
    reply: string,
    origin: number | undefined,
    access: Access | null = null,
    namespace = namespaceOf(access),
  ): Promise<Json> {
    const [a, b, c] = t;
    if (a === 'INFO' && t.length === 1) return accountInfo(this, namespace);
    if (a === 'STREAM') {
      if (b === 'NAMES' && t.length === 2) return streamNames(this, body, access, namespace);
      if (b === 'LIST' && t.length === 2) return streamList(this, body, access, namespace);
      if (t.length === 3) {
        if (b === 'CREATE' || b === 'UPDATE' || b === 'DELETE') {
          const out = await (b === 'CREATE'
            ? streamCreate(this, c, body, access, namespace)
            : b === 'UPDATE'
              ? streamUpdate(this, c, body, access, namespace)
              : streamDelete(this, c));
          this.refreshGuards();
          this.syncSources();
          // A stream of an account with storage limits is checked from its first publish on.
          await this.countAccounts();
          return out;
        }
        if (b === 'INFO') return streamInfo(this, c, body);
        if (b === 'PURGE') return streamPurge(this, c, body);
      }
      if (b === 'MSG' && t.length === 4) {
        if (c === 'GET') return msgGet(this, t[3], body);
        if (c === 'DELETE') return msgDelete(this, t[3], body);
      }
    }
    if (a === 'DIRECT' && b === 'GET' && t.length >= 3) {
      await directGet(this, t, body, reply, directServer(this, c));
      return NO_ANSWER;
    }
    if (a === 'CONSUMER') {
      if ((b === 'CREATE' && t.length >= 3) || (b === 'DURABLE' && c === 'CREATE' && t.length === 5)) {
        return consumerCreate(this, t, body);
      }
      if (b === 'NAMES' && t.length === 3) return consumerNames(this, c, body);
      if (b === 'LIST' && t.length === 3) return consumerList(this, c, body);
      if (t.length === 4) {
        if (b === 'INFO') {
          await this.freshen(c);
          await this.freshView(c);
          return consumerInfoReq(this, c, t[3]);
        }
        if (b === 'DELETE') return consumerDelete(this, c, t[3]);
      }
      if (b === 'MSG' && c === 'NEXT' && t.length === 5) {
        pullRequest(this, t[3], t[4], body, reply, origin);
        return NO_ANSWER;
      }
    }
    return { error: JsErr.badRequest(`JetStream API $JS.API.${t.join('.')} is not supported by FlowMQ`) };
  }
}
