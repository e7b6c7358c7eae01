// Preloaded into each `deno test` run of run.sh (--preload): a test still running after NATSJS_TEST_TIMEOUT seconds
// (default 30) fails with "timed out after ...", so that a test waiting forever for a reply (a feature the server
// does not have) costs that limit instead of the whole run. Nothing else of a test changes. (JavaScript, not
// TypeScript: FlowMQ's tsc would read a .ts here and knows no Deno.)
/* global Deno */
const limit = Number(Deno.env.get('NATSJS_TEST_TIMEOUT') ?? '30') * 1000;
function bounded(fn) {
  return function (...args) {
    let timer;
    const limited = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${limit / 1000}s (run.sh's limit per test)`)), limit);
    });
    return Promise.race([Promise.resolve().then(() => fn.apply(this, args)), limited]).finally(() => clearTimeout(timer));
  };
}
function wrapArgs(args) {
  return args.map((a) => {
    if (typeof a === 'function') return bounded(a);
    if (a && typeof a === 'object' && typeof a.fn === 'function') return { ...a, fn: bounded(a.fn) };
    return a;
  });
}
const original = Deno.test;
const patched = (...args) => original(...wrapArgs(args));
patched.ignore = original.ignore;
patched.only = (...args) => original.only(...wrapArgs(args));
Object.defineProperty(Deno, 'test', { value: patched, configurable: true, writable: true });
