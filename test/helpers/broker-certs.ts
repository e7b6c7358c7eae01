/**
 * Certificates for the cluster channel's mutual TLS (--cluster-tls cert) in tests: a throwaway CA (EC P-256, one
 * day, made by Debian's openssl in a temporary directory) and broker certificates it signs, each usable both as a
 * TLS server and as a TLS client (a broker accepts and dials). A plain module: bench/ and e2e helpers use it too.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface BrokerCert {
  certPath: string;
  keyPath: string;
  cert: string;
  key: string;
}

export interface BrokerCa {
  dir: string;
  /** The CA certificate (PEM) and its file: --cluster-tls-ca. */
  caPath: string;
  ca: string;
  /** A broker certificate signed by this CA (CN = name; serverAuth and clientAuth). */
  issue(name: string): BrokerCert;
}

const EC = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

export function makeBrokerCa(prefix = 'flowmq-cluster-ca-'): BrokerCa {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const caPath = join(dir, 'ca.pem');
  const caKey = join(dir, 'ca-key.pem');
  execFileSync('openssl', ['req', '-x509', ...EC, '-days', '1', '-subj', `/CN=FlowMQ cluster test CA ${prefix}`, '-keyout', caKey, '-out', caPath], {
    stdio: 'ignore',
  });
  let n = 0;
  const issue = (name: string): BrokerCert => {
    const base = join(dir, `broker-${n++}`);
    writeFileSync(`${base}.ext`, 'basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n');
    execFileSync('openssl', ['req', '-new', ...EC, '-subj', `/CN=${name}`, '-keyout', `${base}-key.pem`, '-out', `${base}.csr`], { stdio: 'ignore' });
    execFileSync(
      'openssl',
      ['x509', '-req', '-in', `${base}.csr`, '-CA', caPath, '-CAkey', caKey, '-CAcreateserial', '-days', '1', '-extfile', `${base}.ext`, '-out', `${base}.pem`],
      { stdio: 'ignore' },
    );
    return { certPath: `${base}.pem`, keyPath: `${base}-key.pem`, cert: readFileSync(`${base}.pem`, 'utf8'), key: readFileSync(`${base}-key.pem`, 'utf8') };
  };
  return { dir, caPath, ca: readFileSync(caPath, 'utf8'), issue };
}
