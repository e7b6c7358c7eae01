/**
 * `npm run chaos [-- --minutes M --seed S --keep --max-faults N --gap-ms MIN,MAX --no-subscriber]`: a seeded nemesis injects
 * faults (kill -9, SIGSTOP past the lease, graceful restart, S3 stalls and cuts, a broker cut off from PostgreSQL or
 * from its peers) into a three-broker cluster under Kafka, MQTT, AMQP and JetStream traffic; afterwards everything
 * acknowledged is read back (bench/reliability/chaos.ts). Prints a table per fault kind and per load, and last
 * `chaos: N acknowledged, N lost, N duplicated`. Exits 1 when an acknowledged message is lost (the persistent MQTT
 * subscriber's included), or the idempotent Kafka producer duplicated or reordered.
 */
import { parseArgs } from 'node:util';
import { formatChaosSummary, runChaos } from './reliability/chaos.js';

const { values } = parseArgs({
  options: {
    minutes: { type: 'string', default: '3' },
    seed: { type: 'string', default: '1' },
    'max-faults': { type: 'string' },
    // The quiet time after the cluster recovered from a fault: uniform in [min, max] ms.
    'gap-ms': { type: 'string', default: '2000,6000' },
    keep: { type: 'boolean', default: false },
    'no-subscriber': { type: 'boolean', default: false },
    quiet: { type: 'boolean', default: false },
  },
});
const s = await runChaos({
  minutes: Number(values.minutes),
  seed: Number(values.seed),
  maxFaults: values['max-faults'] === undefined ? undefined : Number(values['max-faults']),
  gapMs: values['gap-ms'].split(',').map(Number) as [number, number],
  keep: values.keep,
  subscriber: !values['no-subscriber'],
  log: values.quiet ? undefined : (l) => console.log(l),
});
console.log(formatChaosSummary(s));
process.exit(s.ok ? 0 : 1);
