// bench/reshape-reads: are reads and writes of a volume right while the node's pool grows?
//
//   npx tsc -p . && nice -n 19 node dist/bench/reshape-reads.js [--trials 12] [--drive-mib 384]
//
// One lab guest (Debian 13's 6.12 by default, one vCPU, as the cluster e2e's storage guests) with
// two emulated NVMe drives, no control plane and no agent: each trial runs
// test/e2e/scripts/reshape-reads.py in the guest, which builds the pool the way the agent does
// (one-device md raid1 --force, btrfs, a NOCOW volume file exported by nvmet's file backend and
// connected over nvme-tcp loopback), grows it with the exact commands of pool-growth.ts
// (raid1 → raid0, raid0 grow with --add: md's raid4 takeover + reshape, btrfs resize max), extends
// the file in the middle of the reshape (as a volume resize does), and meanwhile reads the
// patterns continuously with O_DIRECT through nvme-tcp, through the file and from md directly, and
// rewrites and re-reads another region through nvme-tcp. Trials vary md's reshape speed and the
// moment of the resize. Each trial's JSON lines go to <log dir>/reshape-reads.<pid>.log; a line
// per trial and a total are printed.
import { appendFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { labKernelLabel, prepareLab, script, startGuest } from '../test/e2e/lab/index.js';

const { values } = parseArgs({
  options: {
    trials: { type: 'string', default: '12' },
    'drive-mib': { type: 'string', default: '384' },
    /** Kill the background mdadm after the grow and change raid4 → raid0 later, by hand (phases apart). */
    'kill-mdadm': { type: 'boolean', default: false },
    /** Extra arguments for every trial of reshape-reads.py (e.g. "--raid4-idle 20"). */
    extra: { type: 'string', default: '' },
  },
});
const TRIALS = Number(values.trials);
const DRIVE_MIB = Number(values['drive-mib']);
/** Reshape speed cap (KB/s, 0 = md's default) and when the file is extended (fraction of the reshape). */
const VARIANTS: readonly { syncMax: number; resizeAt: number }[] = [
  { syncMax: 0, resizeAt: 0.5 },
  { syncMax: 0, resizeAt: 0.05 },
  { syncMax: 8000, resizeAt: 0.3 },
  { syncMax: 0, resizeAt: 0.9 },
  { syncMax: 3000, resizeAt: 0.6 },
  { syncMax: 0, resizeAt: -1 },
];

interface Summary {
  counts: Record<string, number>;
  mismatches: number;
  errors: string[];
  finalBad: number;
  written: number;
  elapsed: number;
}

async function main(): Promise<void> {
  const logDir = process.env['STRATA_E2E_LOG_DIR'] ?? join(tmpdir(), 'strata-e2e-logs');
  mkdirSync(logDir, { recursive: true });
  const log = join(logDir, `reshape-reads.${process.pid}.log`);
  const lab = await prepareLab();
  console.log(`# reshape-reads on ${labKernelLabel()}, ${TRIALS} trials, drives ${DRIVE_MIB} MiB, log ${log}`);
  const guest = await startGuest({
    name: 'reshape',
    nvmeDrives: [
      { serial: 'STRATA-RS-DATA0', sizeMiB: DRIVE_MIB },
      { serial: 'STRATA-RS-SPARE', sizeMiB: DRIVE_MIB },
    ],
    memoryMiB: 1024,
    cpus: 1,
    lab,
    bootTimeoutMs: 240_000,
  });
  const totals = { trials: 0, mismatches: 0, finalBad: 0, reads: 0, writes: 0, errors: 0 };
  try {
    const blockOf = async (serial: string) => (await guest.runOk(['sh', script('nvme-ns-by-serial.sh'), serial], { timeoutMs: 30_000 })).stdout.trim();
    const d0 = await blockOf('STRATA-RS-DATA0');
    const d1 = await blockOf('STRATA-RS-SPARE');
    console.log(`# guest ${(await guest.runOk(['uname', '-r'])).stdout.trim()}, drives ${d0} ${d1}, mdadm ${(await guest.run(['mdadm', '--version'])).stderr.trim()}`);
    for (let trial = 0; trial < TRIALS; trial++) {
      const variant = VARIANTS[trial % VARIANTS.length]!;
      const args = ['python3', script('reshape-reads.py'), d0, d1, '--sync-max', String(variant.syncMax), '--resize-at', String(variant.resizeAt), '--seed', String(trial + 1)];
      if (values['kill-mdadm']) args.push('--kill-mdadm');
      if (values.extra) args.push(...values.extra.split(' ').filter((a) => a !== ''));
      const started = Date.now();
      const result = await guest.run(args, { timeoutMs: 1_500_000 });
      appendFileSync(log, `### trial ${trial + 1} ${JSON.stringify(variant)} exit ${result.code}\n${result.stdout}${result.stderr ? `--- stderr\n${result.stderr}\n` : ''}`);
      const summaryLine = result.stdout.split('\n').reverse().find((l) => l.startsWith('{"summary"'));
      const summary = summaryLine ? (JSON.parse(summaryLine) as { summary: Summary }).summary : undefined;
      totals.trials++;
      if (!summary) {
        console.log(`trial ${trial + 1} ${JSON.stringify(variant)}: no summary (exit ${result.code}): ${result.stderr.trim().split('\n').slice(-3).join(' | ')}`);
        continue;
      }
      const reads = (summary.counts['nvme'] ?? 0) + (summary.counts['file'] ?? 0) + (summary.counts['md'] ?? 0);
      totals.mismatches += summary.mismatches;
      totals.finalBad += summary.finalBad;
      totals.reads += reads;
      totals.writes += summary.counts['write'] ?? 0;
      totals.errors += summary.errors.length;
      console.log(
        `trial ${trial + 1} ${JSON.stringify(variant)}: ${((Date.now() - started) / 1000).toFixed(0)} s, reads ${JSON.stringify(summary.counts)}, ` +
          `mismatches ${summary.mismatches}, errors ${summary.errors.length}, bad at the end ${summary.finalBad}`,
      );
      for (const line of result.stdout.split('\n').filter((l) => l.includes('"MISMATCH"') || l.includes('_ERROR"'))) {
        const m = JSON.parse(line) as { kind?: string; where?: number; phase?: string; firstDiff?: number; readStarted?: unknown; got?: string; want?: string; rereads?: string[] };
        console.log(`  ${JSON.stringify({ kind: m.kind, where: m.where, phase: m.phase, firstDiff: m.firstDiff, readStarted: m.readStarted, got: m.got?.slice(0, 12), want: m.want?.slice(0, 12), rereads: m.rereads?.map((r) => r.slice(0, 12)) })}`);
      }
    }
  } finally {
    await guest.stop();
    console.log(`# total: ${JSON.stringify(totals)}`);
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
