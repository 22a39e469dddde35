import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { GrpcCode, StrataError, errorRegistry, httpStatusFor, httpStatusOf, toStrataError, type ErrorCode } from './errors.js';
import { packageRoot } from './paths.js';

describe('error registry', () => {
  it('documents every code in docs/errors.md with its HTTP status and gRPC code', () => {
    const doc = readFileSync(join(packageRoot, 'docs/errors.md'), 'utf8');
    for (const [code, definition] of Object.entries(errorRegistry)) {
      const row = doc.split('\n').find((line) => line.startsWith(`| ${code} |`));
      assert.ok(row, `docs/errors.md has a row for ${code}`);
      const http = httpStatusOf(code as ErrorCode);
      assert.ok(row.includes(`| ${http} |`), `${code} row shows HTTP ${http}`);
      assert.ok(row.includes(`| ${definition.grpc} |`), `${code} row shows gRPC ${definition.grpc}`);
    }
  });

  it('maps gRPC codes to the HTTP statuses clients expect (wire-conventions §3)', () => {
    const expected: [number, number][] = [[3, 400], [5, 404], [6, 409], [7, 403], [8, 429], [9, 412], [10, 409], [12, 501], [13, 500], [14, 503], [16, 401]];
    for (const [grpc, http] of expected) assert.equal(httpStatusFor(grpc as (typeof GrpcCode)[keyof typeof GrpcCode]), http);
  });

  it('serializes the wire body and hides unknown errors behind INTERNAL', () => {
    const err = new StrataError('NOT_FOUND', 'node x not found');
    assert.deepEqual(err.toWire(), { error: 'node x not found', code: 5, message: 'node x not found' });
    const internal = toStrataError(new Error('secret detail'));
    assert.equal(internal.httpStatus, 500);
    assert.equal(internal.message, 'internal error');
  });
});
