/**
 * The layer rule of src/ (docs/architecture.md): core < util < config < storage < cluster < control < protocols <
 * broker / cli. A folder imports only folders to its left, and no file is part of an import circle (type-only
 * imports count: a circle of types is a circle of design). `npm run lint` runs it.
 */
const ORDER = ['core', 'util', 'config', 'storage', 'cluster', 'control', 'protocols'];
const TOP = ['broker.ts', 'index.ts', 'cli'];

/** A rule per layer: what it must not import (every layer to its right, and the top). */
const layerRules = ORDER.map((layer, i) => ({
  name: `layer-${layer}`,
  comment: `src/${layer}/ may import only ${ORDER.slice(0, i).join(', ') || 'itself'} (and ${layer} itself)`,
  severity: 'error',
  from: { path: `^src/${layer}/` },
  to: { path: [...ORDER.slice(i + 1).map((l) => `^src/${l}/`), ...TOP.map((t) => `^src/${t}`)] },
}));

module.exports = {
  forbidden: [
    ...layerRules,
    {
      name: 'no-circular',
      comment: 'no import circles in src/, type-only imports included',
      severity: 'error',
      from: { path: '^src/' },
      to: { circular: true },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    exclude: { path: '^src/control/dashboard/' },
  },
};
