import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { z } from 'zod';
import { StrataError } from '../../lib/errors.js';
import { parseSize } from '../../lib/contract/size.js';
import { boolean, compression, enumeration, integer, optional, parseInput, size } from './lenient.js';

const GiB = 1073741824n;

describe('lenient wire input', () => {
  it('accepts every size form of wire-conventions §2 for 1 GiB', () => {
    for (const form of ['1073741824', '1073741824b', '1 gib', '1GiB', '1gib', '1G', ' 1 GIB ', 1073741824]) {
      assert.equal(parseSize(form), GiB, String(form));
    }
    assert.equal(parseSize('1GB'), 1_000_000_000n, 'decimal units are powers of 1000');
    assert.equal(parseSize('2 TiB'), 2n * 1024n * GiB);
    assert.equal(parseSize('1pib'), 1024n ** 5n);
  });

  it('rejects zero, negatives, fractions, unknown units and non-sizes', () => {
    for (const bad of ['0', '0gib', '-1', '1.5GiB', '1 GiBs', 'lots', '', '9223372036854775808', 1.5, -3, true, null, {}]) {
      assert.throws(() => parseSize(bad), Error, String(bad));
    }
  });

  it('null means not given; numbers may be strings; enums by name or number', () => {
    const schema = z.object({
      count: optional(integer({ min: 1, max: 3 })),
      sector: optional(enumeration(['sectorSize_Default', 'sectorSize_512B', 'sectorSize_4K'], { '4096': 'sectorSize_4K', '512': 'sectorSize_512B' })),
      flag: optional(boolean),
      compress: optional(compression),
      bytes: optional(size),
    });
    assert.deepEqual(parseInput(schema, { count: null, sector: null }), { count: undefined, sector: undefined });
    assert.equal(parseInput(schema, { count: '3' }).count, 3);
    assert.equal(parseInput(schema, { sector: 4096 }).sector, 'sectorSize_4K');
    assert.equal(parseInput(schema, { sector: '2' }).sector, 'sectorSize_4K');
    assert.equal(parseInput(schema, { sector: 1 }).sector, 'sectorSize_512B');
    assert.equal(parseInput(schema, { sector: 'sectorsize_512b' }).sector, 'sectorSize_512B');
    assert.equal(parseInput(schema, { flag: 'True' }).flag, true);
    for (const [input, expected] of [[true, true], ['True', true], ['enable', true], ['enabled', true], ['false', false], ['False', false], ['disable', false], ['disabled', false], ['', false]] as const) {
      assert.equal(parseInput(schema, { compress: input }).compress, expected, String(input));
    }
    assert.equal(parseInput(schema, { bytes: '1 GiB' }).bytes, GiB);
    assert.deepEqual(Object.keys(parseInput(schema, { unknown: 1 })).includes('unknown'), false, 'unknown keys are dropped');
  });

  it('reports every bad field in one 400', () => {
    const schema = z.object({ count: optional(integer({ min: 1, max: 3 })), compress: optional(compression) });
    assert.throws(
      () => parseInput(schema, { count: '7', compress: 'maybe' }),
      (err: unknown) => err instanceof StrataError && err.httpStatus === 400 && /count/.test(err.message) && /compress/.test(err.message),
    );
  });
});
