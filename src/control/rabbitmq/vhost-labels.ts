/**
 * Vhost labels of the per-vhost management resources (permissions, topic permissions, policies, definitions): a vhost
 * is a namespace (docs/namespaces.md), labelled `/` for `default`. These routes are the broker administrators', so a
 * label is absolute here (`/` is `default` whoever asks), unlike `ctx.vhost`, where a tenant's `/` is its own.
 */
import { DEFAULT_NAMESPACE } from '../../core/namespaces.js';
import { notFound, type RabbitContext } from './context.js';
import { VHOST, vhostOfNamespace } from './format.js';

/** The namespace of a vhost label (`/` and `default` are `default`'s), or null when no namespace has it. */
export function namespaceOfVhost(ctx: RabbitContext, vhost: string): string | null {
  if (vhost === VHOST || vhost === DEFAULT_NAMESPACE) return DEFAULT_NAMESPACE;
  return ctx.access.directory.namespace(vhost) !== undefined ? vhost : null;
}

/** A path's vhost as its label (`/` for `default`); 404 when no namespace has it. */
export function vhostLabel(ctx: RabbitContext, vhost: string): string {
  const ns = namespaceOfVhost(ctx, vhost);
  if (ns === null) throw notFound();
  return vhostOfNamespace(ns);
}

/** The namespace of a label made by vhostLabel. */
export const namespaceOfLabel = (label: string): string => (label === VHOST ? DEFAULT_NAMESPACE : label);

/** A user's own namespace (where its permissions are unscoped policies); `default` for one the directory lost. */
export function homeOf(ctx: RabbitContext): (user: string) => string {
  return (user) => ctx.access.directory.user(user)?.namespace ?? DEFAULT_NAMESPACE;
}
