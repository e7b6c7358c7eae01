/**
 * YAML parsing for the config and users files, with the parser loaded on first use: it was ~17 ms of a broker's
 * start, which reads no file unless `--config` or `--users-file` names one (test/storage/open-imports.test.ts keeps
 * it off the start path). Loaded synchronously (the package is CommonJS), so its callers stay synchronous.
 */
import { createRequire } from 'node:module';

let yaml: typeof import('yaml') | null = null;

/** yaml's `parse` (YAML 1.2, one document); throws the parser's error on bad input. */
export function parseYaml(text: string): unknown {
  yaml ??= createRequire(import.meta.url)('yaml') as typeof import('yaml');
  return yaml.parse(text);
}
