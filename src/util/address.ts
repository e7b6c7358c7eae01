/**
 * Host names and addresses as the configuration and the admin API take them: the canonical form of a host name or
 * IP literal, loopback and wildcard addresses, and address filters from CIDR blocks.
 */
import { BlockList, isIP } from 'node:net';
import { networkInterfaces } from 'node:os';
import { FlowError } from '../core/errors.js';

/**
 * The canonical host name of a Host header value or an allowed-hosts entry (`name`, `name:port`, `1.2.3.4:80`,
 * `[::1]:80`), without its port; null if it is not one. IP literals come back canonical (IPv6 without brackets),
 * names lower case without a trailing dot.
 */
export function hostName(value: string): string | null {
  const v = value.trim().toLowerCase();
  let host: string;
  const bracket = /^\[([0-9a-f:.]+)\](?::\d{1,5})?$/.exec(v);
  if (bracket) {
    host = bracket[1];
    if (isIP(host) !== 6) return null;
  } else if (isIP(v) === 6) {
    host = v; // a bare IPv6 address (allowed-hosts entries; never a valid Host header, which brackets it)
  } else {
    const m = /^([a-z0-9_.-]+)(?::\d{1,5})?$/.exec(v);
    if (!m) return null;
    host = m[1].replace(/\.$/, '');
    if (host === '' || host.startsWith('.') || host.includes('..')) return null;
  }
  // The WHATWG URL parser gives IP literals one spelling ([0:0::1] and ::1, 127.1 and 127.0.0.1).
  try {
    const h = new URL(`http://${isIP(host) === 6 ? `[${host}]` : host}/`).hostname;
    return h.startsWith('[') ? h.slice(1, -1) : h;
  } catch {
    return null;
  }
}

export function isLoopback(address: string | undefined): boolean {
  if (address === undefined) return false;
  const a = address.startsWith('::ffff:') ? address.slice(7) : address;
  return a === '::1' || (isIP(a) === 4 && a.startsWith('127.'));
}

/**
 * The default bind address of the protocol listeners: `::`, which Node binds dual-stack (IPv6 and IPv4-mapped IPv4:
 * clients of `[::1]` and of 127.0.0.1 both reach it), or `0.0.0.0` on a host without any IPv6 address (a kernel booted
 * with IPv6 off), where binding `::` fails with EAFNOSUPPORT. Decided once, here, so every listener (and the cluster
 * channel, which binds --host too) gets the same.
 */
export const ANY_ADDRESS: string = hasIpv6() ? '::' : '0.0.0.0';

function hasIpv6(): boolean {
  try {
    return Object.values(networkInterfaces()).some((list) => (list ?? []).some((a) => a.family === 'IPv6'));
  } catch {
    return false;
  }
}

/** A peer address as people read it: an IPv4 client of a dual-stack listener (`::ffff:10.0.0.1`) as `10.0.0.1`. */
export function plainAddress(address: string | undefined): string | undefined {
  return address !== undefined && address.startsWith('::ffff:') && isIP(address.slice(7)) === 4 ? address.slice(7) : address;
}

export function isWildcard(address: string): boolean {
  return address === '0.0.0.0' || address === '::';
}

/** `--http-metrics-allow`: CIDR blocks (or single addresses) that may read /metrics, /healthz and /readyz. */
export function addressFilter(entries: readonly string[]): ((address: string | undefined) => boolean) | null {
  if (entries.length === 0) return null;
  const list = new BlockList();
  for (const e of entries) {
    const [addr, bits] = e.split('/');
    const family = isIP(addr);
    if (family === 0) throw new FlowError('CONFIG_ERROR', `http-metrics-allow: "${e}" is not an address or CIDR block`);
    const type = family === 6 ? 'ipv6' : 'ipv4';
    if (bits === undefined) list.addAddress(addr, type);
    else {
      const n = Number(bits);
      if (!/^\d+$/.test(bits) || n > (family === 6 ? 128 : 32)) throw new FlowError('CONFIG_ERROR', `http-metrics-allow: "${e}" has a bad prefix length`);
      list.addSubnet(addr, n, type);
    }
  }
  return (address) => {
    if (address === undefined) return false;
    const a = address.startsWith('::ffff:') ? address.slice(7) : address;
    return list.check(a, isIP(a) === 6 ? 'ipv6' : 'ipv4');
  };
}
