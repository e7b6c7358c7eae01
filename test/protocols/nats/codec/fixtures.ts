/**
 * Golden NATS byte fixtures: what each parser must make of an input, and the error it must end with. Cases
 * marked "ns" were checked against Debian's nats-server 2.9.10 with a raw socket (what it answered is in the
 * name): the server parser follows it.
 */
import { NatsErrText } from '../../../../src/protocols/nats/codec/index.js';
import type { Op } from './recorder.js';

export interface Case {
  name: string;
  input: string;
  ops: Op[];
  /** undefined: no error; a string: the -ERR text; null: closed without -ERR. */
  error?: string | null;
}

const U = NatsErrText.UNKNOWN_OP;

export const SERVER_CASES: Case[] = [
  { name: 'PING', input: 'PING\r\n', ops: [['PING']] },
  { name: 'PONG', input: 'PONG\r\n', ops: [['PONG']] },
  { name: 'lower-case ops (ns: pub/ping accepted)', input: 'pub foo 3\r\nabc\r\nping\r\npong\r\n', ops: [['PUB', 'foo', null, 'abc'], ['PING'], ['PONG']] },
  {
    name: 'mixed-case ops',
    input: 'PuB foo 1\r\nx\r\nSuB foo 1\r\nUnSuB 1\r\n',
    ops: [
      ['PUB', 'foo', null, 'x'],
      ['SUB', 'foo', null, '1'],
      ['UNSUB', '1', null],
    ],
  },
  { name: 'PING with junk after it (ns: PINGX and "PING foo" answer PONG)', input: 'PINGX\r\nPING foo\r\n', ops: [['PING'], ['PING']] },
  { name: 'bare LF line ends (ns)', input: 'PING\nPUB foo 3\nabc\r\n', ops: [['PING'], ['PUB', 'foo', null, 'abc']] },
  { name: 'a CR inside the line (ns: "PING\\rPING\\r\\n" is one PING)', input: 'PING\rPING\r\n', ops: [['PING']] },
  { name: 'PUB', input: 'PUB foo.bar 5\r\nhello\r\n', ops: [['PUB', 'foo.bar', null, 'hello']] },
  { name: 'PUB with reply', input: 'PUB foo _INBOX.abc.1 2\r\nhi\r\n', ops: [['PUB', 'foo', '_INBOX.abc.1', 'hi']] },
  { name: 'PUB empty payload', input: 'PUB foo 0\r\n\r\n', ops: [['PUB', 'foo', null, '']] },
  { name: 'PUB with reply and empty payload (ns)', input: 'PUB foo bar 0\r\n\r\n', ops: [['PUB', 'foo', 'bar', '']] },
  { name: 'PUB payload holding CRLF', input: 'PUB foo 6\r\na\r\nb\r\n\r\n', ops: [['PUB', 'foo', null, 'a\r\nb\r\n']] },
  {
    name: 'PUB tabs and runs of blanks (ns)',
    input: 'PUB\tfoo\t\t3\r\nabc\r\nPUB foo  3 \r\nabc\r\n',
    ops: [
      ['PUB', 'foo', null, 'abc'],
      ['PUB', 'foo', null, 'abc'],
    ],
  },
  { name: 'PUB size with leading zero (ns)', input: 'PUB foo 03\r\nabc\r\n', ops: [['PUB', 'foo', null, 'abc']] },
  { name: 'PUB UTF-8 subject', input: 'PUB caf\xc3\xa9.\xe6\x97\xa5 1\r\nx\r\n', ops: [['PUB', 'café.日', null, 'x']] },
  {
    name: 'PUB subject repeated (cache)',
    input: 'PUB a.b 1\r\nx\r\nPUB a.b 1\r\ny\r\nPUB a.c 1\r\nz\r\nPUB a.b 1\r\nw\r\n',
    ops: [
      ['PUB', 'a.b', null, 'x'],
      ['PUB', 'a.b', null, 'y'],
      ['PUB', 'a.c', null, 'z'],
      ['PUB', 'a.b', null, 'w'],
    ],
  },
  { name: 'HPUB', input: 'HPUB foo 18 20\r\nNATS/1.0\r\nA: b\r\n\r\nhi\r\n', ops: [['HPUB', 'foo', null, 'NATS/1.0\r\nA: b\r\n\r\n', 'hi']] },
  { name: 'HPUB with reply', input: 'HPUB foo r.1 12 14\r\nNATS/1.0\r\n\r\nab\r\n', ops: [['HPUB', 'foo', 'r.1', 'NATS/1.0\r\n\r\n', 'ab']] },
  { name: 'HPUB sizes 0 0 (ns: accepted)', input: 'HPUB foo 0 0\r\n\r\n', ops: [['HPUB', 'foo', null, '', '']] },
  { name: 'HPUB header = total', input: 'HPUB foo 3 3\r\nabc\r\n', ops: [['HPUB', 'foo', null, 'abc', '']] },
  { name: 'SUB', input: 'SUB foo.* 1\r\n', ops: [['SUB', 'foo.*', null, '1']] },
  { name: 'SUB with queue', input: 'SUB foo.> workers 22\r\n', ops: [['SUB', 'foo.>', 'workers', '22']] },
  { name: 'SUB trailing blank (ns)', input: 'SUB foo 1 \r\n', ops: [['SUB', 'foo', null, '1']] },
  { name: 'UNSUB', input: 'UNSUB 1\r\n', ops: [['UNSUB', '1', null]] },
  { name: 'UNSUB with max', input: 'UNSUB 1 5\r\n', ops: [['UNSUB', '1', 5]] },
  { name: 'UNSUB with max 0', input: 'UNSUB 1 0\r\n', ops: [['UNSUB', '1', 0]] },
  { name: 'UNSUB non-numeric max is a plain UNSUB (ns)', input: 'UNSUB 1 x\r\n', ops: [['UNSUB', '1', null]] },
  {
    name: 'CONNECT',
    input:
      'CONNECT {"verbose":false,"pedantic":false,"tls_required":false,"name":"svc","lang":"nats.js","version":"2.29.3","protocol":1,"headers":true,"no_responders":true,"echo":false,"user":"u","pass":"p","auth_token":"t","sig":"s","jwt":"j","nkey":"n","extra":[1]}\r\n',
    ops: [
      [
        'CONNECT',
        {
          verbose: false,
          pedantic: false,
          tls_required: false,
          name: 'svc',
          lang: 'nats.js',
          version: '2.29.3',
          protocol: 1,
          headers: true,
          no_responders: true,
          echo: false,
          user: 'u',
          pass: 'p',
          auth_token: 't',
          sig: 's',
          jwt: 'j',
          nkey: 'n',
        },
      ],
    ],
  },
  { name: 'CONNECT with trailing blanks (ns)', input: 'CONNECT {}  \r\n', ops: [['CONNECT', {}]] },
  { name: 'CONNECT null fields are absent', input: 'CONNECT {"user":null,"echo":null}\r\n', ops: [['CONNECT', {}]] },
  {
    name: '+OK and -ERR from a client',
    input: "+OK\r\n-ERR 'Stale Connection'\r\n-ERR bare words\r\n",
    ops: [['+OK'], ['-ERR', 'Stale Connection'], ['-ERR', 'bare words']],
  },
  { name: 'INFO from a client is ignored (ns)', input: 'INFO {}\r\nPING\r\n', ops: [['PING']] },

  // Errors.
  { name: 'unknown op (ns)', input: 'XYZ\r\nPING\r\n', ops: [], error: U },
  { name: 'empty line (ns)', input: '\r\nPING\r\n', ops: [], error: U },
  { name: 'leading blank (ns)', input: ' PING\r\n', ops: [], error: U },
  { name: 'PO (ns)', input: 'PO\r\n', ops: [], error: U },
  { name: 'MSG from a client (ns)', input: 'MSG foo 1 3\r\nabc\r\n', ops: [], error: U },
  { name: 'UNSUB without arguments (ns)', input: 'UNSUB\r\n', ops: [], error: U },
  { name: 'SUB without arguments (ns)', input: 'SUB\r\n', ops: [], error: U },
  { name: 'PUBX', input: 'PUBX foo 1\r\nx\r\n', ops: [], error: U },
  { name: 'payload longer than its size (ns)', input: 'PUB foo 3\r\nabcd\r\nPING\r\n', ops: [], error: U },
  { name: 'payload ended by a bare LF (ns)', input: 'PUB foo 3\r\nabc\nPING\r\n', ops: [], error: U },
  { name: 'blank line after a payload (ns)', input: 'PUB foo 3\r\nabc\r\n\r\nPING\r\n', ops: [['PUB', 'foo', null, 'abc']], error: U },
  { name: 'client -ERR is passed on, then the next op', input: '-ERR x\r\nPING\r\n', ops: [['-ERR', 'x'], ['PING']] },
  { name: 'PUB without size (ns: closed silently)', input: 'PUB foo\r\nPING\r\n', ops: [], error: null },
  { name: 'PUB with too many arguments (ns)', input: 'PUB foo a b 5\r\n', ops: [], error: null },
  { name: 'PUB non-numeric size (ns)', input: 'PUB foo x\r\n', ops: [], error: null },
  { name: 'PUB negative size (ns)', input: 'PUB foo -1\r\n', ops: [], error: null },
  { name: 'PUB signed size (ns)', input: 'PUB foo +3\r\nabc\r\n', ops: [], error: null },
  { name: 'PUB ten-digit size (ns)', input: 'PUB x 1000000000\r\n', ops: [], error: null },
  { name: 'SUB with one argument (ns)', input: 'SUB foo\r\n', ops: [], error: null },
  { name: 'SUB with trailing blank only (ns)', input: 'SUB foo \r\n', ops: [], error: null },
  { name: 'SUB with four arguments (ns)', input: 'SUB foo a b c\r\n', ops: [], error: null },
  { name: 'UNSUB with three arguments (ns)', input: 'UNSUB 1 2 3\r\n', ops: [], error: null },
  { name: 'HPUB header larger than total (ns)', input: 'HPUB foo 5 3\r\nabc\r\n', ops: [], error: null },
  { name: 'HPUB one size (ns)', input: 'HPUB foo 3\r\nabc\r\n', ops: [], error: null },
  { name: 'bare CONNECT (ns)', input: 'CONNECT\r\n', ops: [], error: null },
  { name: 'CONNECT bad JSON (ns)', input: 'CONNECT {bad\r\n', ops: [], error: null },
  { name: 'CONNECT junk after JSON (ns)', input: 'CONNECT {"verbose":false} junk\r\n', ops: [], error: null },
  { name: 'CONNECT not an object', input: 'CONNECT [1]\r\n', ops: [], error: null },
  { name: 'CONNECT wrong field type', input: 'CONNECT {"verbose":"yes"}\r\n', ops: [], error: null },
  { name: 'CONNECT fractional protocol', input: 'CONNECT {"protocol":1.5}\r\n', ops: [], error: null },
];

export const CLIENT_CASES: Case[] = [
  {
    name: 'INFO',
    input: 'INFO {"server_id":"X","version":"2.9.10","headers":true,"max_payload":1048576}\r\n',
    ops: [['INFO', { server_id: 'X', version: '2.9.10', headers: true, max_payload: 1048576 }]],
  },
  { name: 'MSG', input: 'MSG foo.bar 9 5\r\nhello\r\n', ops: [['MSG', 'foo.bar', '9', null, 'hello']] },
  { name: 'MSG with reply', input: 'MSG foo 1 _INBOX.x 2\r\nhi\r\n', ops: [['MSG', 'foo', '1', '_INBOX.x', 'hi']] },
  { name: 'MSG empty', input: 'MSG foo 1 0\r\n\r\n', ops: [['MSG', 'foo', '1', null, '']] },
  { name: 'HMSG', input: 'HMSG foo 1 16 18\r\nNATS/1.0 503\r\n\r\nok\r\n', ops: [['HMSG', 'foo', '1', null, 'NATS/1.0 503\r\n\r\n', 'ok']] },
  { name: 'HMSG with reply', input: 'HMSG foo 1 r 12 12\r\nNATS/1.0\r\n\r\n\r\n', ops: [['HMSG', 'foo', '1', 'r', 'NATS/1.0\r\n\r\n', '']] },
  {
    name: '+OK -ERR PING PONG',
    input: "+OK\r\n-ERR 'Authorization Violation'\r\nPING\r\nPONG\r\n",
    ops: [['+OK'], ['-ERR', 'Authorization Violation'], ['PING'], ['PONG']],
  },
  { name: 'lower case', input: 'msg a 1 1\r\nx\r\nping\r\n', ops: [['MSG', 'a', '1', null, 'x'], ['PING']] },
  { name: 'PUB is unknown to a client', input: 'PUB a 1\r\nx\r\n', ops: [], error: U },
  { name: 'MSG missing sid', input: 'MSG a 1\r\nx\r\n', ops: [], error: null },
  { name: 'HMSG header > total', input: 'HMSG a 1 5 3\r\nabc\r\n', ops: [], error: null },
  { name: 'INFO bad JSON', input: 'INFO {\r\n', ops: [], error: null },
  { name: 'MSG payload not followed by CRLF', input: 'MSG a 1 1\r\nxy\r\n', ops: [], error: U },
];
