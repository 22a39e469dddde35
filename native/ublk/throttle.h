/*
 * Token buckets for strata-ublk: one per limit (read IOPS, write IOPS, read bytes/s, write
 * bytes/s). Kept apart from the ublk code so it can be tested on any machine (throttle-test.c).
 */
#ifndef STRATA_UBLK_THROTTLE_H
#define STRATA_UBLK_THROTTLE_H

#include <stdint.h>

/*
 * How much a bucket may hold, in seconds of its rate: what an idle volume may send at once, and
 * what a server that could not run for a while (its CPU taken, a stalled guest) makes up for
 * afterwards. A limit is then an average over any second, which is what "per second" promises.
 * Shorter buckets lost tokens in the emulated lab, whose guests stall for 0.2-1 s when the host
 * is busy: with 0.1 s a 300 IOPS limit measured 274 (native/README.md).
 */
#define THROTTLE_BURST_SECONDS 1.0

struct bucket {
	uint64_t rate;  /* tokens per second; 0 = unlimited */
	double tokens;  /* may go negative: a request larger than the bucket is let through and paid back */
	double cap;     /* rate * THROTTLE_BURST_SECONDS, at least one token */
	uint64_t last;  /* ns (CLOCK_MONOTONIC) of the last refill */
};

/* One direction (reads or writes): an operations bucket and a bytes bucket. */
struct direction {
	struct bucket ops;
	struct bucket bytes;
};

/* Sets a bucket's rate. Going from unlimited to a limit starts full; otherwise the tokens stay (clamped). */
void bucket_set_rate(struct bucket *b, uint64_t rate, uint64_t now);

/*
 * 0 when a request of `bytes` may go now (and takes its tokens), else how many ns until it may.
 * Nothing is taken when it must wait, so the caller asks again later.
 */
uint64_t direction_admit(struct direction *d, uint64_t bytes, uint64_t now);

#endif
