// test-runner: apart (scripts/test.mjs): a 3-broker cluster whose leases and heartbeats must not starve for CPU beside another cluster or a second other file
/**
 * Cluster scenarios that share one started cluster (issue 26: a cluster start is PostgreSQL, s3rver and three
 * broker processes, several seconds each time): every protocol pair across brokers (cluster-pairs.ts), live
 * pub/sub (cluster-live.ts), then MQTT sessions (cluster-mqtt-sessions.ts, last: it kills broker 1). Each scenario
 * waits until the live interest of the one before is gone everywhere, so its interest counts start from zero as on
 * a fresh cluster. The options are those of the scenarios that need them: anonymous clients in and everything
 * allowed (pairs' clients are anonymous too, and no policy exists while they run, as with the defaults).
 *
 * The other cluster files keep a cluster of their own: they start with a different number of brokers or lease,
 * need no users at start (policy-bypass-cluster), or kill, pause or add brokers early in their run.
 */
import { after, before } from 'node:test';
import { TestCluster } from '../helpers/cluster.js';
import { pairsScenario } from './cluster-pairs.js';
import { liveScenario } from './cluster-live.js';
import { sessionsScenario } from './cluster-mqtt-sessions.js';

let c: TestCluster | undefined;
const cluster = (): TestCluster => {
  if (c === undefined) throw new Error('the shared cluster did not start');
  return c;
};

before(async () => {
  c = await TestCluster.start({ brokers: 3, haproxy: false, args: ['--allow-anonymous', 'true', '--default-policy', 'allow'] });
});
after(async () => {
  await c?.close();
});

pairsScenario(cluster);
liveScenario(cluster);
sessionsScenario(cluster);
