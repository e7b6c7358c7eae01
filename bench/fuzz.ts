/**
 * `npm run fuzz [-- --iterations N --seed S --target NAME[,NAME] --from I --hang-ms MS]`: generated and mutated
 * inputs for every decoder of client bytes (see bench/reliability/fuzz-targets.ts), 1,000,000 per decoder by
 * default. Exits 1 when any input throws something other than the decoder's own error, allocates more than its
 * limit, or hangs; each failure is printed with its index and hex (replay it with --target NAME --from INDEX
 * --iterations 1).
 */
import { parseArgs } from 'node:util';
import { runFuzz, type TargetResult } from './reliability/fuzz.js';

const { values } = parseArgs({
  options: {
    iterations: { type: 'string', default: '1000000' },
    seed: { type: 'string', default: '1' },
    target: { type: 'string', default: '' },
    from: { type: 'string', default: '0' },
    'hang-ms': { type: 'string', default: '5000' },
    'max-failures': { type: 'string', default: '5' },
  },
});
const iterations = Number(values.iterations);
const seed = Number(values.seed);
const started = Date.now();
console.log(`fuzz: ${iterations} inputs per decoder, seed ${seed}${values.target ? `, targets matching ${values.target}` : ''}`);
const fmt = (r: TargetResult): string =>
  `${r.target.padEnd(34)} ${String(r.inputs).padStart(9)} inputs ${String(Math.round((r.inputs / r.ms) * 1000)).padStart(7)}/s  accepted ${String(r.accepted).padStart(8)}  refused ${String(r.refused).padStart(8)}  largest alloc ${String(r.largestAlloc).padStart(9)} B  failures ${r.failures.length}`;
const results = await runFuzz({
  iterations,
  seed,
  filter: values.target,
  from: Number(values.from),
  hangMs: Number(values['hang-ms']),
  maxFailures: Number(values['max-failures']),
  onProgress: (r) => console.log(fmt(r)),
});
let failures = 0;
let inputs = 0;
for (const r of results) {
  inputs += r.inputs;
  for (const f of r.failures) {
    failures++;
    console.log(
      `\nFAIL ${f.target} input #${f.index} (${f.kind}): ${f.detail}\n  replay: npm run fuzz -- --seed ${seed} --target ${f.target} --from ${f.index} --iterations 1\n  hex: ${f.hex.length > 4000 ? f.hex.slice(0, 4000) + '...' : f.hex}`,
    );
  }
}
console.log(`\nfuzz: ${results.length} decoders, ${inputs} inputs, ${failures} failures, ${((Date.now() - started) / 1000).toFixed(1)} s`);
process.exit(failures > 0 ? 1 : 0);
