/**
 * RabbitMQ password hashes (src/control/rabbit-hash.ts), checked against a hash RabbitMQ 3.10.8 itself made
 * (PUT /api/users/u1 {"password":"p1"}, then GET /api/users/u1), and round trips of the three algorithms.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { isFlowError } from '../../src/core/index.js';
import { checkRabbitHash, rabbitAlgorithm, rabbitHashMatches, rabbitHashOf } from '../../src/control/rabbit-hash.js';

const FROM_RABBITMQ = { algorithm: 'rabbit_password_hashing_sha256' as const, hash: 'xLrBTbVBTCuLhgwbkwg8NhbGn/frG7EittRDT58aXCv2kAhg' };

describe('RabbitMQ password hashes', () => {
  it('match the password RabbitMQ hashed, and no other', () => {
    assert.equal(rabbitHashMatches(FROM_RABBITMQ, 'p1'), true);
    assert.equal(rabbitHashMatches(FROM_RABBITMQ, Buffer.from('p1')), true);
    assert.equal(rabbitHashMatches(FROM_RABBITMQ, 'p2'), false);
    assert.equal(rabbitHashMatches({ ...FROM_RABBITMQ, algorithm: 'rabbit_password_hashing_sha512' }, 'p1'), false);
  });

  it('an empty hash matches nothing (RabbitMQ: no password login)', () => {
    assert.equal(rabbitHashMatches({ algorithm: 'rabbit_password_hashing_sha256', hash: '' }, ''), false);
  });

  it('round-trips every algorithm with a random 4-byte salt', () => {
    for (const algorithm of ['rabbit_password_hashing_sha256', 'rabbit_password_hashing_sha512', 'rabbit_password_hashing_md5'] as const) {
      const h = rabbitHashOf('s3cret', algorithm);
      assert.equal(checkRabbitHash(h), h);
      assert.equal(rabbitHashMatches(h, 's3cret'), true);
      assert.equal(rabbitHashMatches(h, 's3creT'), false);
      assert.notEqual(rabbitHashOf('s3cret', algorithm).hash, h.hash, 'salted');
    }
  });

  it('refuses unknown algorithms and hashes of the wrong length', () => {
    assert.equal(rabbitAlgorithm(undefined), 'rabbit_password_hashing_sha256');
    assert.throws(
      () => rabbitAlgorithm('bcrypt'),
      (e: unknown) => isFlowError(e, 'INVALID_ARGUMENT'),
    );
    assert.throws(
      () => checkRabbitHash({ algorithm: 'rabbit_password_hashing_sha512', hash: FROM_RABBITMQ.hash }),
      (e: unknown) => isFlowError(e, 'INVALID_ARGUMENT'),
    );
  });
});
