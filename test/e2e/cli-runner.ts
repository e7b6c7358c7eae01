/**
 * Runs `flowmq` CLI commands one after another in one Node process, for tests that run dozens of them: each command
 * as `bin/flowmq` runs it (src/cli/main.ts `main`, its return value the exit code), with the environment the
 * command was given and its own stdout and stderr. A process per command costs Node's start-up and the CLI's
 * imports each time (most of the time of test/e2e/cli.test.ts); bin/flowmq itself stays covered by the commands
 * that test runs as real processes (exit codes, an unreachable broker).
 *
 * As a program (the child): reads one JSON request per line on stdin ({args, env}), answers one JSON line on
 * stdout ({code, stdout, stderr}). stdin and stdout are pipes, as for a command run by a script: no terminal.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { RunResult } from './harness.js';

interface Request {
  args: string[];
  env: Record<string, string>;
}

/** The parent side: one child, commands sent one at a time. */
export class CliRunner {
  private readonly pending: Array<(r: RunResult) => void> = [];
  private queue: Promise<unknown> = Promise.resolve();

  private constructor(private readonly child: ChildProcess) {
    const lines = createInterface({ input: child.stdout! });
    lines.on('line', (line) => this.pending.shift()?.(JSON.parse(line) as RunResult));
    child.stderr!.on('data', (d: Buffer) => process.stderr.write(d));
  }

  static start(): CliRunner {
    const child = spawn(process.execPath, [fileURLToPath(import.meta.url), '--serve'], { stdio: ['pipe', 'pipe', 'pipe'] });
    return new CliRunner(child);
  }

  /** Runs `flowmq ...args` with `env` added to this process's environment (as harness.run does for a child). */
  run(args: string[], env: NodeJS.ProcessEnv = {}, timeoutMs = 15_000): Promise<RunResult> {
    const next = this.queue.then(
      () =>
        new Promise<RunResult>((resolve, reject) => {
          const timer = setTimeout(() => reject(new Error(`flowmq ${args.join(' ')}: no answer in ${timeoutMs} ms`)), timeoutMs);
          this.pending.push((r) => {
            clearTimeout(timer);
            resolve(r);
          });
          const request: Request = { args, env: Object.fromEntries(Object.entries(env).filter((e): e is [string, string] => e[1] !== undefined)) };
          this.child.stdin!.write(`${JSON.stringify(request)}\n`);
        }),
    );
    this.queue = next.catch(() => undefined);
    return next;
  }

  close(): void {
    this.child.stdin!.end();
  }
}

/** The child: the CLI's module loaded once, each request run with its own environment and captured output. */
async function serve(): Promise<void> {
  const { main } = await import('../../src/cli/main.js');
  const baseEnv = { ...process.env };
  const reply = process.stdout.write.bind(process.stdout);
  const outWrite = process.stdout.write;
  const errWrite = process.stderr.write;
  const lines = createInterface({ input: process.stdin });
  for await (const line of lines) {
    const req = JSON.parse(line) as Request;
    for (const k of Object.keys(process.env)) if (!(k in baseEnv)) delete process.env[k];
    Object.assign(process.env, baseEnv, req.env);
    let stdout = '';
    let stderr = '';
    const capture = (add: (s: string) => void) =>
      ((chunk: string | Uint8Array, ...rest: unknown[]) => {
        add(typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString());
        const cb = rest.find((r) => typeof r === 'function') as (() => void) | undefined;
        cb?.();
        return true;
      }) as typeof process.stdout.write;
    process.stdout.write = capture((s) => (stdout += s));
    process.stderr.write = capture((s) => (stderr += s));
    let code: number;
    try {
      code = await main(req.args);
    } finally {
      process.stdout.write = outWrite;
      process.stderr.write = errWrite;
    }
    reply(`${JSON.stringify({ code, signal: null, stdout, stderr })}\n`);
  }
}

if (process.argv[2] === '--serve') await serve();
