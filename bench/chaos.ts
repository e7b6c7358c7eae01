/**
 * `npm run chaos [-- --minutes M --seed S --keep --max-faults N --gap-ms MIN,MAX --no-subscriber --kinds K1,K2 --pg-ha --netns]`:
 * a seeded nemesis injects faults (kill -9, SIGSTOP past the lease, graceful restart, S3 stalls, cuts and slowness,
 * PostgreSQL slowness, a broker cut off from PostgreSQL or from its peers, a broker killed mid-write, a bit flipped in
 * a segment object; with `--pg-ha` the PostgreSQL primary lost; with `--netns` each broker in its own network
 * namespace, its link pulled, its packets to its peers, PostgreSQL or S3 dropped, or a share of them lost) into a three-broker cluster under Kafka, MQTT, AMQP and JetStream traffic; afterwards everything
 * acknowledged is read back (bench/reliability/chaos.ts). Prints a table per fault kind and per load, and last
 * `chaos: N acknowledged, N lost, N duplicated`. Exits 1 when a fault's own check fails (a torn object not collected, a flipped bit not detected or its
 * batch served), or an acknowledged message is lost (the persistent MQTT
 * subscriber's included), or the idempotent Kafka producer duplicated or reordered.
 */
import { parseArgs } from 'node:util';
import { formatChaosSummary, runChaos } from './reliability/chaos.js';
import { FAULT_KINDS, type FaultKind } from './reliability/chaos-nemesis.js';

const { values } = parseArgs({
  options: {
    minutes: { type: 'string', default: '3' },
    seed: { type: 'string', default: '1' },
    'max-faults': { type: 'string' },
    // The quiet time after the cluster recovered from a fault: uniform in [min, max] ms.
    'gap-ms': { type: 'string', default: '2000,6000' },
    keep: { type: 'boolean', default: false },
    'no-subscriber': { type: 'boolean', default: false },
    // A comma-separated list of fault kinds, injected in that order, in turn (default: all but pg-failover).
    kinds: { type: 'string' },
    // PostgreSQL made highly available by pg_auto_failover; adds the pg-failover kind to the default list.
    'pg-ha': { type: 'boolean', default: false },
    // Each broker in its own network namespace (root, nftables); adds the net-* kinds to the default list.
    netns: { type: 'boolean', default: false },
    quiet: { type: 'boolean', default: false },
  },
});
const kinds = values.kinds?.split(',').filter(Boolean);
for (const k of kinds ?? []) {
  if (!(FAULT_KINDS as readonly string[]).includes(k)) {
    console.error(`unknown fault kind ${k}; kinds: ${FAULT_KINDS.join(', ')}`);
    process.exit(2);
  }
}
const s = await runChaos({
  minutes: Number(values.minutes),
  seed: Number(values.seed),
  maxFaults: values['max-faults'] === undefined ? undefined : Number(values['max-faults']),
  gapMs: values['gap-ms'].split(',').map(Number) as [number, number],
  keep: values.keep,
  subscriber: !values['no-subscriber'],
  kinds: kinds as FaultKind[] | undefined,
  pgHa: values['pg-ha'],
  netns: values.netns,
  log: values.quiet ? undefined : (l) => console.log(l),
});
console.log(formatChaosSummary(s));
process.exit(s.ok ? 0 : 1);
