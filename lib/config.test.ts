import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { StrataError } from './errors.js';
import { envNameOf, flagNameOf, loadConfig, settings } from './config.js';
import { controlPlaneSettings } from '../control-plane/config.js';

const spec = {
  apiPort: { description: 'port', schema: settings.port(), default: 8080 },
  etcdEndpoints: { description: 'etcd', schema: settings.list(), default: ['127.0.0.1:2379'] },
  verbose: { description: 'verbose', schema: settings.boolean(), default: false },
};

describe('configuration', () => {
  it('names env vars and flags after the setting', () => {
    assert.equal(envNameOf('etcdEndpoints'), 'STRATA_ETCD_ENDPOINTS');
    assert.equal(flagNameOf('leaseTtlSeconds'), 'lease-ttl-seconds');
  });

  it('layers default < file < env < flag, and freezes the result', () => {
    const dir = mkdtempSync(join(tmpdir(), 'strata-config-'));
    try {
      const file = join(dir, 'c.json');
      writeFileSync(file, JSON.stringify({ apiPort: 1000, etcdEndpoints: ['a:1', 'b:2'], verbose: true }));
      const options = { program: 't', summary: 't' };
      assert.equal(loadConfig(spec, { ...options, argv: [], env: {} }).apiPort, 8080);
      const fromFile = loadConfig(spec, { ...options, argv: ['--config', file], env: {} });
      assert.deepEqual([fromFile.apiPort, fromFile.etcdEndpoints, fromFile.verbose], [1000, ['a:1', 'b:2'], true]);
      const fromEnv = loadConfig(spec, { ...options, argv: [], env: { STRATA_CONFIG: file, STRATA_API_PORT: '2000', STRATA_ETCD_ENDPOINTS: 'x:1, y:2' } });
      assert.deepEqual([fromEnv.apiPort, fromEnv.etcdEndpoints], [2000, ['x:1', 'y:2']]);
      const fromFlag = loadConfig(spec, { ...options, argv: ['--config', file, '--api-port', '3000'], env: { STRATA_API_PORT: '2000' } });
      assert.equal(fromFlag.apiPort, 3000);
      assert.ok(Object.isFrozen(fromFlag) && Object.isFrozen(fromFlag.etcdEndpoints));
      assert.throws(() => {
        (fromFlag as { apiPort: number }).apiPort = 1;
      }, TypeError);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('rejects invalid values and unknown file keys, naming the setting and its source', () => {
    const options = { program: 't', summary: 't', env: {} };
    assert.throws(
      () => loadConfig(spec, { ...options, argv: ['--api-port', '70000'] }),
      (err: unknown) => err instanceof StrataError && err.code === 'CONFIG_INVALID' && /apiPort \(from flag --api-port\)/.test(err.message),
    );
    const dir = mkdtempSync(join(tmpdir(), 'strata-config-'));
    try {
      writeFileSync(join(dir, 'c.json'), JSON.stringify({ apiPrt: 1 }));
      assert.throws(() => loadConfig(spec, { ...options, argv: ['--config', join(dir, 'c.json')] }), /unknown settings apiPrt/);
      writeFileSync(join(dir, 'bad.json'), '{');
      assert.throws(() => loadConfig(spec, { ...options, argv: ['--config', join(dir, 'bad.json')] }), /config file/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('--help lists every control-plane setting with its env name', () => {
    let out = '';
    const write = process.stdout.write;
    process.stdout.write = ((chunk: string) => {
      out += chunk;
      return true;
    }) as typeof process.stdout.write;
    try {
      assert.throws(() => loadConfig(controlPlaneSettings, { program: 'strata-control-plane', summary: 's', argv: ['--help'], env: {} }));
    } finally {
      process.stdout.write = write;
    }
    for (const key of Object.keys(controlPlaneSettings)) {
      assert.ok(out.includes(`--${flagNameOf(key)}`), `--help shows --${flagNameOf(key)}`);
      assert.ok(out.includes(envNameOf(key)), `--help shows ${envNameOf(key)}`);
    }
  });
});
