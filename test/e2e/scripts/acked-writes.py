#!/usr/bin/env python3
"""A log of acknowledged writes, for failover tests (runs in the initiator guest).

  write DEVICE LOG STOPFILE [COUNT]   writes 4 KiB block n (a pattern naming n) with
                                      O_DIRECT|O_DSYNC, and appends "n <unix time>" to LOG once the
                                      write returned, until STOPFILE exists or COUNT blocks; an
                                      error is appended as "error <n> <message>" and ends the run
  verify DEVICE LOG                   reads back every block LOG names; prints "checked=N bad=M"
Every line in LOG is a write the storage acknowledged: none may read back wrong after a failover.
"""
import mmap
import os
import sys
import time

BLOCK = 4096


def pattern(n):
    line = b"strata acked block %d\n" % n
    return (line * (BLOCK // len(line) + 1))[:BLOCK]


def write(device, log, stopfile, count):
    fd = os.open(device, os.O_WRONLY | os.O_DIRECT | os.O_DSYNC)
    buf = mmap.mmap(-1, BLOCK)
    with open(log, "w", buffering=1) as out:
        n = 0
        while n < count and not os.path.exists(stopfile):
            buf.seek(0)
            buf.write(pattern(n))
            try:
                os.pwrite(fd, buf, n * BLOCK)
            except OSError as err:
                out.write("error %d %s\n" % (n, err))
                return 1
            out.write("%d %.6f\n" % (n, time.time()))
            n += 1
    return 0


def verify(device, log):
    fd = os.open(device, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, BLOCK)
    checked = bad = 0
    for line in open(log):
        fields = line.split()
        if not fields or fields[0] == "error":
            continue
        n = int(fields[0])
        os.preadv(fd, [buf], n * BLOCK)
        checked += 1
        if buf[:BLOCK] != pattern(n):
            bad += 1
    print("checked=%d bad=%d" % (checked, bad))
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "write":
        sys.exit(write(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]) if len(sys.argv) > 5 else 1 << 30))
    sys.exit(verify(sys.argv[2], sys.argv[3]))
