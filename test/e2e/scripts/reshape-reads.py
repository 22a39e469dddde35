#!/usr/bin/env python3
"""One trial of the pool-growth read check (bench/reshape-reads.ts runs it in a lab guest).

Builds the node pool the way the agent does (agent/datapath/pool/: a one-device md raid1 made
with --force, btrfs on it, a NOCOW volume file), writes random patterns into the file with
O_DIRECT, exports it through nvmet's file backend (buffered_io=0) and connects to it over
nvme-tcp loopback in the same guest. Then it grows the pool (`mdadm --grow --level=0`, then
`mdadm --grow --raid-devices=2 --add D1` as the agent did before, whose background mdadm ends
with a raid4 → raid0 level change; or with --grow-level4 what pool-growth.ts does now:
`--level=4 --raid-devices=3 --force --add D1`, raid4 → raid0 only offline at the end; then
`btrfs filesystem resize max`), extends the file in the middle of the reshape (truncate up +
revalidate_size, as a volume resize does), while threads read the patterns continuously with
O_DIRECT through
  nvme   the nvme-tcp namespace (what a host sees),
  file   the backing file on btrfs,
  md     the md device at the pattern's physical place (found by scanning the array),
and a writer rewrites 64 KiB blocks of another region through nvme and reads each back.
Every read is compared with what it must be; a mismatch is printed with md's state at that
moment and three immediate re-reads. Ends with a full verification once md is idle.

  python3 reshape-reads.py D0 D1 [--sync-max KBps] [--resize-at FRACTION] [--seed N]
                            [--kill-mdadm [--raid4-idle S]] [--grow-level4] [--tail S]
Prints JSON lines; the last one is the summary ({"summary": ...}).
"""
import argparse
import hashlib
import json
import mmap
import os
import random
import subprocess
import threading
import time

MiB = 1 << 20
NAME = 'strata-repro'
MD = f'/dev/md/{NAME}'
MNT = '/mnt/repro-pool'
NQN = 'nqn.2024-01.io.strata:repro:reshape'
UUID = '6b7f2a4c-1d2e-4f00-9a7b-5e5e5e5e0001'
PORT = '4420'
CFG = '/sys/kernel/config/nvmet'
VOLUME_MiB = 32
GROWN_MiB = 64
PATTERN_AT = [0, 1, 5, 17, 31]  # MiB offsets holding a static pattern
WRITE_REGION = (8, 16)  # MiB [start, end): rewritten by the writer

t0 = time.monotonic()
out_lock = threading.Lock()


def emit(**fields):
    fields['t'] = round(time.monotonic() - t0, 3)
    with out_lock:
        print(json.dumps(fields), flush=True)


def run(*argv, check=True):
    r = subprocess.run(list(argv), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f'{" ".join(argv)}: exit {r.returncode}: {r.stderr.strip()}')
    return r.stdout


def read_text(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ''


def md_block():
    return os.path.basename(os.path.realpath(MD))


def md_state():
    md = f'/sys/block/{md_block()}/md'
    state = {k: read_text(f'{md}/{k}') for k in ['level', 'raid_disks', 'sync_action', 'reshape_position', 'reshape_direction', 'sync_completed', 'suspend_lo', 'suspend_hi', 'array_state', 'degraded', 'chunk_size', 'layout']}
    for entry in sorted(os.listdir(md)) if os.path.isdir(md) else []:
        if entry.startswith('dev-'):
            state[entry] = {k: read_text(f'{md}/{entry}/{k}') for k in ['slot', 'state', 'offset', 'new_offset']}
    return state


def aligned(size):
    return mmap.mmap(-1, size)


def pread_direct(path, offset, size):
    buf = aligned(size)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        n = os.preadv(fd, [buf], offset)
    finally:
        os.close(fd)
    return bytes(buf[:n])


def pread_buffered(path, offset, size):
    with open(path, 'rb') as f:
        f.seek(offset)
        return f.read(size)


def pwrite_direct(path, offset, data, sync=False):
    buf = aligned(len(data))
    buf[:] = data
    flags = os.O_WRONLY | os.O_DIRECT | (os.O_DSYNC if sync else 0)
    fd = os.open(path, flags)
    try:
        n = os.pwritev(fd, [buf], offset)
    finally:
        os.close(fd)
    if n != len(data):
        raise RuntimeError(f'short write {n} at {offset} of {path}')


def sha(data):
    return hashlib.sha256(data).hexdigest()


def cleanup(d0, d1):
    run('nvme', 'disconnect', '-n', NQN, check=False)
    port = f'{CFG}/ports/1'
    if os.path.islink(f'{port}/subsystems/{NQN}'):
        os.unlink(f'{port}/subsystems/{NQN}')
    if os.path.isdir(port):
        os.rmdir(port)
    sub = f'{CFG}/subsystems/{NQN}'
    if os.path.isdir(sub):
        for ns in os.listdir(f'{sub}/namespaces'):
            with open(f'{sub}/namespaces/{ns}/enable', 'w') as f:
                f.write('0')
            os.rmdir(f'{sub}/namespaces/{ns}')
        os.rmdir(sub)
    run('umount', MNT, check=False)
    if os.path.exists(MD):
        run('mdadm', '--stop', MD, check=False)
    for d in (d0, d1):
        run('mdadm', '--zero-superblock', '--force', d, check=False)
        run('wipefs', '-a', '-q', d, check=False)
        run('dd', 'if=/dev/zero', f'of={d}', 'bs=1M', 'count=8', 'oflag=direct', 'status=none', check=False)


def export_and_connect(path):
    sub = f'{CFG}/subsystems/{NQN}'
    os.makedirs(sub)
    with open(f'{sub}/attr_allow_any_host', 'w') as f:
        f.write('1')
    ns = f'{sub}/namespaces/1'
    os.makedirs(ns)
    for attr, value in [('device_path', path), ('device_uuid', UUID), ('buffered_io', '0'), ('enable', '1')]:
        with open(f'{ns}/{attr}', 'w') as f:
            f.write(value)
    port = f'{CFG}/ports/1'
    os.makedirs(port)
    for attr, value in [('addr_trtype', 'tcp'), ('addr_adrfam', 'ipv4'), ('addr_traddr', '127.0.0.1'), ('addr_trsvcid', PORT)]:
        with open(f'{port}/{attr}', 'w') as f:
            f.write(value)
    os.symlink(sub, f'{port}/subsystems/{NQN}')
    run('nvme', 'connect', '-t', 'tcp', '-a', '127.0.0.1', '-s', PORT, '-n', NQN)
    here = os.path.dirname(os.path.abspath(__file__))
    return run('sh', os.path.join(here, 'nvme-ns-by-uuid.sh'), UUID, '30').strip()


def find_on_md(pattern_head):
    """Byte offset on the md device of the 4 KiB block starting with pattern_head."""
    size = int(read_text(f'/sys/block/{md_block()}/size')) * 512
    chunk = 4 * MiB
    for base in range(0, size, chunk):
        data = pread_direct(MD, base, min(chunk, size - base))
        at = data.find(pattern_head)
        while at >= 0:
            if at % 4096 == 0:
                return base + at
            at = data.find(pattern_head, at + 1)
    return None


class Checker:
    def __init__(self, args, device, path, md_offsets, patterns):
        self.args = args
        self.device = device
        self.path = path
        self.md_offsets = md_offsets
        self.patterns = patterns  # MiB -> bytes
        self.stop = threading.Event()
        self.counts = {}
        self.mismatches = []
        self.errors = []
        self.written = {}  # byte offset -> bytes (writer region, last acknowledged)
        self.lock = threading.Lock()
        self.phase = 'setup'
        self.blocks = {}
        for mib, data in patterns.items():
            for i in range(0, len(data), 4096):
                self.blocks[data[i:i + 4096]] = f'{mib}:{i // 4096}'

    def count(self, kind):
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1

    def classify(self, got):
        """Each 4 KiB block of got: which pattern block it is ('17:3'), 'w' (writer data) or '?'."""
        out = []
        for i in range(0, len(got), 4096):
            b = got[i:i + 4096]
            if b == bytes(len(b)):
                out.append('0')
                continue
            out.append(self.blocks.get(b, '?'))
        # run-length: [label, count]
        runs = []
        for label in out:
            if runs and runs[-1][0] == label:
                runs[-1][1] += 1
            else:
                runs.append([label, 1])
        return runs

    def mismatch(self, kind, where, offset, want, got, reread, started=None):
        state = md_state()
        extra = {}
        if kind in ('nvme', 'file'):
            try:
                extra['file_direct'] = sha(pread_direct(self.path, offset, len(want)))
                extra['file_buffered'] = sha(pread_buffered(self.path, offset, len(want)))
            except OSError as e:
                extra['file_error'] = str(e)
        if started is not None:
            extra['readStarted'] = started
        extra['blocks'] = self.classify(got)
        first_bad = next((i for i in range(0, len(got), 4096) if got[i:i + 4096] != want[i:i + 4096]), None)
        extra['firstBadBlockAt'] = first_bad
        extra['phase'] = self.phase
        record = dict(event='MISMATCH', kind=kind, where=where, offset=offset, want=sha(want), got=sha(got),
                      equalBytes=sum(1 for a, b in zip(want, got) if a == b), firstDiff=next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), None),
                      zeros=got.count(0), rereads=[sha(r()) for r in [reread] * 3], md=state, **extra)
        with self.lock:
            self.mismatches.append(record)
        emit(**record)

    def reader(self, kind):
        rng = random.Random(hash(kind))
        while not self.stop.is_set():
            mib = rng.choice(PATTERN_AT)
            want = self.patterns[mib]
            started = dict(t=round(time.monotonic() - t0, 3), **{k: v for k, v in md_state().items() if k in ('level', 'sync_action', 'reshape_position', 'sync_completed')})
            try:
                if kind == 'nvme':
                    offset = mib * MiB
                    got = pread_direct(self.device, offset, MiB)
                    reread = lambda: pread_direct(self.device, offset, MiB)  # noqa: E731
                elif kind == 'file':
                    offset = mib * MiB
                    got = pread_direct(self.path, offset, MiB)
                    reread = lambda: pread_direct(self.path, offset, MiB)  # noqa: E731
                else:
                    if self.md_offsets.get(mib) is None:
                        return
                    offset = self.md_offsets[mib]
                    got = pread_direct(MD, offset, MiB)
                    reread = lambda: pread_direct(MD, offset, MiB)  # noqa: E731
            except OSError as e:
                with self.lock:
                    self.errors.append(f'{kind} read {mib} MiB: {e}')
                emit(event='READ_ERROR', kind=kind, mib=mib, error=str(e), md=md_state())
                time.sleep(0.2)
                continue
            self.count(kind)
            if got != want:
                self.mismatch(kind, mib, offset, want, got, reread, started)

    def writer(self):
        rng = random.Random(self.args.seed)
        start, end = WRITE_REGION
        block = 64 * 1024
        while not self.stop.is_set():
            offset = start * MiB + rng.randrange(0, (end - start) * MiB // block) * block
            data = rng.randbytes(block)
            started = dict(t=round(time.monotonic() - t0, 3), **{k: v for k, v in md_state().items() if k in ('level', 'sync_action', 'reshape_position', 'sync_completed')})
            try:
                pwrite_direct(self.device, offset, data)
                with self.lock:
                    self.written[offset] = data
                got = pread_direct(self.device, offset, block)
            except OSError as e:
                with self.lock:
                    self.errors.append(f'write/read at {offset}: {e}')
                emit(event='WRITE_ERROR', offset=offset, error=str(e), md=md_state())
                time.sleep(0.2)
                continue
            self.count('write')
            if got != data:
                self.mismatch('write-readback', 'nvme', offset, data, got, lambda: pread_direct(self.device, offset, block), started)

    def verify_all(self, label):
        bad = []
        for mib, want in self.patterns.items():
            for kind, path in (('nvme', self.device), ('file', self.path)):
                got = pread_direct(path, mib * MiB, MiB)
                if got != want:
                    bad.append(dict(kind=kind, mib=mib, got=sha(got), want=sha(want)))
        for offset, data in sorted(self.written.items()):
            got = pread_direct(self.device, offset, len(data))
            if got != data:
                bad.append(dict(kind='written', offset=offset, got=sha(got), want=sha(data)))
        emit(event='VERIFY', label=label, bad=bad, written=len(self.written))
        return bad


def mdadm_processes():
    """(pid, command line) of every mdadm running in this guest."""
    found = []
    for pid in os.listdir('/proc'):
        if pid.isdigit():
            try:
                with open(f'/proc/{pid}/cmdline', 'rb') as f:
                    argv = f.read().split(b'\0')
            except OSError:
                continue
            if argv and argv[0].endswith(b'mdadm'):
                found.append((int(pid), ' '.join(a.decode() for a in argv if a)))
    return found


def mdadm_pids():
    return [line for _, line in mdadm_processes()]


def monitor(stop):
    """Emits md's state (and the mdadm processes alive) whenever it changes, sampled every 50 ms."""
    last = None
    while not stop.is_set():
        s = md_state()
        size = read_text(f'/sys/block/{md_block()}/size')
        key = {k: v for k, v in s.items() if k not in ('sync_completed', 'reshape_position')}
        key['size'] = size
        key['mdadm'] = mdadm_pids()
        if key != last:
            emit(event='md', state=key, reshape_position=s['reshape_position'], sync_completed=s['sync_completed'])
            last = key
        time.sleep(0.05)


def wait_idle(timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s = md_state()
        if s['sync_action'] in ('idle', '') and s['reshape_position'] in ('none', '') and s['level'] == 'raid0':
            return s
        time.sleep(0.25)
    raise RuntimeError(f'md not idle raid0 after {timeout}s: {md_state()}')


def main():
    p = argparse.ArgumentParser()
    p.add_argument('d0')
    p.add_argument('d1')
    p.add_argument('--sync-max', type=int, default=0, help='md sync_speed_max in KB/s during the reshape (0: default)')
    p.add_argument('--resize-at', type=float, default=0.5, help='extend the file when the reshape is this far (negative: no resize)')
    p.add_argument('--seed', type=int, default=1)
    p.add_argument('--no-readers', action='store_true')
    p.add_argument('--kill-mdadm', action='store_true', help='kill the background mdadm after the grow; convert raid4 to raid0 later')
    p.add_argument('--raid4-idle', type=float, default=15.0, help='with --kill-mdadm: seconds of reads between the reshape end and the level change')
    p.add_argument('--grow-level4', action='store_true', help='the workaround: grow to raid4 (no online raid4 → raid0), convert offline at the end')
    p.add_argument('--tail', type=float, default=10.0, help='seconds of reading after the filesystem resize')
    args = p.parse_args()
    rng = random.Random(args.seed)

    cleanup(args.d0, args.d1)
    run('mdadm', '--create', MD, '--run', '--metadata=1.2', '--level=1', '--raid-devices=1', f'--name={NAME}', '--force', args.d0)
    run('mkfs.btrfs', '-q', '-f', '-L', NAME, MD)
    os.makedirs(MNT, exist_ok=True)
    run('mount', '-t', 'btrfs', MD, MNT)
    os.makedirs(f'{MNT}/volumes', exist_ok=True)
    # A compressed volume written first, as in the cluster e2e (buffered, zstd).
    zst = f'{MNT}/volumes/squeezed.zst'
    open(zst, 'w').close()
    run('btrfs', 'property', 'set', zst, 'compression', 'zstd')
    with open(zst, 'wb') as f:
        f.write(b'Strata compresses this line well. 0123456789\n' * (4 * MiB // 46))
    path = f'{MNT}/volumes/alpha.raw'
    open(path, 'w').close()
    run('chattr', '+C', path)
    os.truncate(path, VOLUME_MiB * MiB)
    device = export_and_connect(path)
    patterns = {mib: rng.randbytes(MiB) for mib in PATTERN_AT}
    for mib, data in patterns.items():
        pwrite_direct(device, mib * MiB, data)
    for mib, data in patterns.items():
        if pread_direct(device, mib * MiB, MiB) != data:
            raise RuntimeError(f'pattern at {mib} MiB did not read back before the grow')
    run('btrfs', 'filesystem', 'sync', MNT)
    md_offsets = {mib: find_on_md(data[:4096]) for mib, data in patterns.items()}
    emit(event='ready', device=device, md=md_state(), mdOffsets=md_offsets, patterns={m: sha(d)[:16] for m, d in patterns.items()})

    checker = Checker(args, device, path, md_offsets, patterns)
    threads = []
    if not args.no_readers:
        threads = [threading.Thread(target=checker.reader, args=(k,), daemon=True) for k in ('nvme', 'file', 'md')]
        threads.append(threading.Thread(target=checker.writer, daemon=True))
        for t in threads:
            t.start()
    monitor_stop = threading.Event()
    threading.Thread(target=monitor, args=(monitor_stop,), daemon=True).start()
    time.sleep(1.0)
    block = md_block()
    run('mdadm', '--grow', MD, '--level=0')
    emit(event='to-raid0', md=md_state())
    time.sleep(1.0)
    # md's global reshape speed cap (this guest only): 0 restores the default.
    with open('/proc/sys/dev/raid/speed_limit_max', 'w') as f:
        f.write(str(args.sync_max if args.sync_max > 0 else 200000))
    checker.phase = 'grow'
    if args.grow_level4:
        # The workaround: ask for raid4 as the end level, so that no raid4 → raid0 takeover runs
        # while the pool serves I/O (mdadm's background process ends a raid0 grow with one).
        run('mdadm', '--grow', MD, '--level=4', '--raid-devices=3', '--force', '--add', args.d1)
    else:
        run('mdadm', '--grow', MD, '--raid-devices=2', '--add', args.d1)
    emit(event='grow-raid0', md=md_state())
    if args.kill_mdadm:
        # As a crash of the background mdadm would: md finishes the reshape alone and the array
        # stays raid4; after --raid4-idle seconds of reads, `mdadm --grow --level=0` by hand, so
        # that the end of the reshape and the level change are apart.
        killed = []
        for pid, _ in mdadm_processes():
            os.kill(pid, 9)
            killed.append(pid)
        with open(f'/sys/block/{block}/md/sync_max', 'w') as f:
            f.write('max')
        emit(event='killed-mdadm', pids=killed, md=md_state())
    resized = args.resize_at < 0
    samples = []
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        s = md_state()
        samples.append((round(time.monotonic() - t0, 2), s['level'], s['sync_action'], s['sync_completed'], s['reshape_position']))
        if not resized:
            m = s['sync_completed'].split('/')
            progress = int(m[0]) / int(m[1]) if len(m) == 2 and m[1].strip() != '0' else (1.0 if s['sync_action'] == 'idle' and s['level'] == 'raid0' else 0.0)
            if progress >= args.resize_at:
                os.truncate(path, GROWN_MiB * MiB)
                with open(f'{CFG}/subsystems/{NQN}/namespaces/1/revalidate_size', 'w') as f:
                    f.write('1')
                resized = True
                emit(event='resize', progress=progress, md=s)
        if s['level'] == 'raid0' and s['reshape_position'] in ('none', '') and s['sync_action'] in ('idle', ''):
            break
        if args.grow_level4 and s['level'] == 'raid4' and s['reshape_position'] in ('none', '') and s['sync_action'] == 'idle' and not any('--grow' in p for p in mdadm_pids()):
            break
        if args.kill_mdadm and s['level'] == 'raid4' and s['reshape_position'] in ('none', '') and s['sync_action'] == 'idle':
            checker.phase = 'raid4-idle'
            emit(event='raid4-idle', md=s)
            time.sleep(args.raid4_idle)
            checker.phase = 'to-raid0'
            run('mdadm', '--grow', MD, '--level=0')
            emit(event='to-raid0-after-reshape', md=md_state())
            checker.phase = 'raid0'
            continue
        time.sleep(0.2)
    checker.phase = 'reshaped'
    emit(event='reshaped', md=md_state(), samples=samples[::max(1, len(samples) // 20)])
    if not args.grow_level4:
        wait_idle(60)
    checker.phase = 'resize-filesystem'
    run('btrfs', 'filesystem', 'resize', 'max', MNT)
    checker.phase = 'tail'
    emit(event='resize-filesystem')
    time.sleep(args.tail)
    checker.stop.set()
    monitor_stop.set()
    for t in threads:
        t.join(30)
    bad = checker.verify_all('after')
    if args.grow_level4:
        # Offline (nothing reads): raid4 → raid0, as the agent does before it mounts the pool.
        run('nvme', 'disconnect', '-n', NQN, check=False)
        with open(f'{CFG}/subsystems/{NQN}/namespaces/1/enable', 'w') as f:
            f.write('0')
        run('umount', MNT)
        run('mdadm', '--grow', MD, '--level=0')
        state = wait_idle(60)
        run('mount', '-t', 'btrfs', MD, MNT)
        offline_bad = [mib for mib, data in checker.patterns.items() if pread_direct(path, mib * MiB, MiB) != data]
        offline_bad += [o for o, data in checker.written.items() if pread_direct(path, o, len(data)) != data]
        emit(event='offline-to-raid0', md=state, bad=offline_bad)
        bad = bad + offline_bad
    emit(summary=dict(counts=checker.counts, mismatches=len(checker.mismatches), errors=checker.errors[:10], finalBad=len(bad), written=len(checker.written), elapsed=round(time.monotonic() - t0, 1)))
    cleanup(args.d0, args.d1)


if __name__ == '__main__':
    main()
