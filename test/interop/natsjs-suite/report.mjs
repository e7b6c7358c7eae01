// Reads the output of one `deno test` run (pretty reporter, NO_COLOR) and prints its counts and its failing tests,
// one a line: <test file>\t<test name>\t<first line of the error>. Counted from the per-test lines, so that a run
// stopped by its time box still counts what finished (a test cut off is counted as `cut off`).
// Usage: node report.mjs <label> <deno test output file> [failures file to write]
import { readFileSync, writeFileSync } from 'node:fs';

const [label, file, failuresOut] = process.argv.slice(2);
const lines = readFileSync(file, 'utf8').split('\n');
const counts = { passed: 0, failed: 0, ignored: 0, cancelled: 0 };
const failed = new Map(); // name -> test file (first seen)
let current = '?';
let running;
for (const l of lines) {
  let m = /^running \d+ tests? from (\S+)/.exec(l);
  if (m) {
    current = m[1].replace(/^\.\//, '');
    continue;
  }
  m = /^(\S.*?) \.\.\. (ok|FAILED|ignored|cancelled) \(/.exec(l);
  if (m) {
    running = undefined;
    if (m[2] === 'ok') counts.passed++;
    else if (m[2] === 'cancelled') counts.cancelled++;
    else if (m[2] === 'ignored') counts.ignored++;
    else {
      counts.failed++;
      if (!failed.has(m[1])) failed.set(m[1], current);
    }
    continue;
  }
  m = /^(\S.*?) \.\.\.\s*$/.exec(l);
  if (m) running = { name: m[1], file: current };
}
// First error line per failing test, from the ERRORS section: "<name> => <where>" then "error: ...".
const errors = new Map();
const start = lines.findIndex((l) => l.trim() === 'ERRORS');
if (start >= 0) {
  for (let i = start + 1; i < lines.length && lines[i].trim() !== 'FAILURES'; i++) {
    const m = /^(\S.*?) => \S+$/.exec(lines[i]);
    if (m && !m[1].includes(' ... ') && !errors.has(m[1])) {
      const e = lines.slice(i + 1, i + 6).find((x) => x.startsWith('error:'));
      // Where in the test file it failed: the first stack line naming a *_test.ts (the test's own location is
      // run.sh's time limit wrapper).
      let at = '';
      for (let j = i + 1; j < lines.length && !/^\S.* => \S+$/.test(lines[j]) && lines[j].trim() !== 'FAILURES'; j++) {
        const w = /([a-z]+\/tests\/\w+_test\.ts:\d+)/.exec(lines[j]);
        if (w) {
          at = ` [${w[1]}]`;
          break;
        }
      }
      if (e) errors.set(m[1], e.replace(/^error:\s*/, '').slice(0, 240) + at);
    }
  }
}
// A test file whose dangling promise fails after its test ended stops there: Deno reports "(uncaught error)" and
// cancels the file's remaining tests.
const uncaught = [...new Set(lines.filter((l) => / \(uncaught error\)$/.test(l)).map((l) => l.replace(/^\.\//, '').replace(/ \(uncaught error\)$/, '')))];
const stopped = uncaught.length ? `, ${counts.cancelled} cancelled (${uncaught.join(', ')} stopped by an uncaught error)` : '';
const cut = running ? ` 1 cut off (${running.file}: ${running.name})` : '';
// nst's notCompatible(): a test needing a newer server than the one announced (/varz version) returns at once and
// passes; FlowMQ announces 2.9.10 like the reference, so the same tests return early on both.
const early = (readFileSync(file, 'utf8').match(/skipping test as server \(/g) ?? []).length;
console.log(
  `== ${label}: ${counts.passed} passed (${early} of them returned early: server below the test's version), ${counts.failed} failed, ${counts.ignored} ignored${stopped}${cut}`,
);
const rows = [...failed].map(([name, f]) => `${f}\t${name}\t${errors.get(name) ?? '(no error text: the run ended first)'}`);
if (running) rows.push(`${running.file}\t${running.name}\t(cut off by the suite's time box)`);
if (failuresOut) writeFileSync(failuresOut, rows.join('\n') + (rows.length ? '\n' : ''));
else for (const r of rows) console.log(`  ${r}`);
