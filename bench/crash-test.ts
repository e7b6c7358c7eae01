/**
 * `npm run crash-test [-- --cycles N --seed S --up-ms MIN,MAX --keep]`: kill -9 cycles of a real bin/flowmq under
 * idempotent Kafka acks=all and MQTT QoS 1/2 load; every acknowledged message must be found afterwards (see
 * bench/reliability/crash.ts). Exits 1 when one is lost, or when an exactly-once message is duplicated.
 * `npm run crash-test -- --scenario eos [--records N --kills K --seed S]`: a transactional consume-transform-produce
 * pipeline under kill -9 (bench/reliability/crash-eos.ts); exits 1 unless the output holds each input exactly once.
 * `npm run crash-test -- --scenario eos-cluster [--records N --kills K --kill-pipeline-every M --seed S --keep]`: the same pipeline with
 * librdkafka on a 3-broker cluster (PostgreSQL + s3rver), killing the coordinator's and the partitions' brokers
 * (bench/reliability/crash-eos-cluster.ts); exits 1 unless the output holds each input exactly once and the group's
 * offsets are at the input's end.
 */
import { parseArgs } from 'node:util';
import { formatSummary, runCrashTest } from './reliability/crash.js';
import { formatEosSummary, runEosCrash } from './reliability/crash-eos.js';
import { formatEosClusterSummary, runEosClusterCrash } from './reliability/crash-eos-cluster.js';

const { values } = parseArgs({
  options: {
    cycles: { type: 'string', default: '100' },
    seed: { type: 'string', default: '1' },
    'up-ms': { type: 'string', default: '200,2000' },
    keep: { type: 'boolean', default: false },
    quiet: { type: 'boolean', default: false },
    // `--scenario eos`: the exactly-once consume-transform-produce pipeline (bench/reliability/crash-eos.ts);
    // `--scenario eos-cluster`: the same on three brokers (bench/reliability/crash-eos-cluster.ts).
    scenario: { type: 'string', default: 'load' },
    records: { type: 'string' },
    kills: { type: 'string' },
    // eos-cluster: every Nth kill of a broker also kills -9 the pipeline process.
    'kill-pipeline-every': { type: 'string', default: '3' },
  },
});
if (values.scenario === 'eos-cluster') {
  const s = await runEosClusterCrash({
    records: Number(values.records ?? '40000'),
    kills: Number(values.kills ?? '9'),
    killPipelineEvery: Number(values['kill-pipeline-every']),
    seed: Number(values.seed),
    keep: values.keep,
    log: values.quiet ? undefined : (l) => console.log(l),
  });
  console.log(formatEosClusterSummary(s));
  if (s.logDir) console.log(`broker and pipeline logs kept: ${s.logDir}`);
  process.exit(s.ok ? 0 : 1);
}
if (values.scenario === 'eos') {
  const s = await runEosCrash({
    records: Number(values.records ?? '50000'),
    kills: Number(values.kills ?? '5'),
    seed: Number(values.seed),
    keep: values.keep,
    log: values.quiet ? undefined : (l) => console.log(l),
  });
  console.log(formatEosSummary(s));
  if (values.keep) console.log(`data directory kept: ${s.dataDir}`);
  process.exit(s.ok ? 0 : 1);
}
const [min, max] = values['up-ms'].split(',').map(Number);
const summary = await runCrashTest({
  cycles: Number(values.cycles),
  seed: Number(values.seed),
  upMs: [min, max],
  keep: values.keep,
  log: values.quiet ? undefined : (l) => console.log(l),
});
console.log(formatSummary(summary));
if (values.keep) console.log(`data directory kept: ${summary.dataDir} (broker log: ${summary.dataDir}.broker.log)`);
process.exit(summary.ok ? 0 : 1);
