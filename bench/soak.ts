/**
 * `npm run soak [-- --minutes M --rate R --sample-seconds S --out soak.png --max-rss-mib-per-min X
 * --max-handles-per-min Y]`: steady mixed traffic on all four protocols against one broker (bench/reliability/soak.ts),
 * a table of samples (throughput, p99 latency, RSS, event-loop lag, handles, descriptors, connections) and a PNG chart;
 * exits 1 on a growth trend of RSS or handles over the second half, or on failed sends.
 */
import { parseArgs } from 'node:util';
import { HEADER, runSoak } from './reliability/soak.js';
import { writeSoakChart } from './reliability/soak-chart.js';

const { values } = parseArgs({
  options: {
    minutes: { type: 'string', default: '10' },
    rate: { type: 'string', default: '200' },
    'sample-seconds': { type: 'string', default: '10' },
    out: { type: 'string', default: 'soak.png' },
    'max-rss-mib-per-min': { type: 'string', default: '4' },
    'max-handles-per-min': { type: 'string', default: '2' },
    cluster: { type: 'boolean', default: false },
  },
});
const minutes = Number(values.minutes);
const r = await runSoak({
  minutes,
  rate: Number(values.rate),
  sampleSeconds: Number(values['sample-seconds']),
  maxRssMibPerMin: Number(values['max-rss-mib-per-min']),
  maxHandlesPerMin: Number(values['max-handles-per-min']),
  cluster: values.cluster,
  log: (l) => console.log(l.startsWith('soak:') ? `${l}\n${HEADER}` : l),
});
await writeSoakChart(
  r.samples,
  `FlowMQ soak${values.cluster ? ' (3-broker cluster)' : ''}: ${minutes} min, ${values.rate} msg/s per protocol (Kafka, MQTT, AMQP, NATS)`,
  values.out,
);
console.log(
  `soak: ${r.acked} acknowledged, ${r.skipped} ticks skipped, ${r.errors} failed; RSS slope ${r.rssSlopeMibPerMin.toFixed(2)} MiB/min, ` +
    `handles slope ${r.handlesSlopePerMin.toFixed(2)}/min (second half); chart ${values.out}`,
);
if (r.failures.length > 0) {
  console.log(`soak: FAILED: ${r.failures.join('; ')}`);
  process.exit(1);
}
console.log('soak: ok');
