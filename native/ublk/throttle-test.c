/*
 * Checks the token buckets against a simulated clock: a closed loop that sends each request as
 * soon as the bucket lets it, for 10 simulated seconds, must come out at the rate (within the
 * one burst a full bucket allows). `make test`; run by test/native-ublk.test.ts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "throttle.h"

#define NS 1000000000ull

static int failures;

static void expect(int ok, const char *what)
{
	printf("%s %s\n", ok ? "ok" : "FAIL", what);
	if (!ok)
		failures++;
}

/* Requests of `bytes` admitted in `seconds` by a direction, sending whenever admitted. */
static double admitted(struct direction *d, uint64_t bytes, double seconds, uint64_t start)
{
	uint64_t now = start, end = start + (uint64_t)(seconds * NS);
	double count = 0;

	while (now < end) {
		uint64_t wait = direction_admit(d, bytes, now);

		if (wait)
			now += wait;
		else
			count++;
	}
	return count;
}

/* A direction with the given rates (0 = unlimited) at time 0. */
static struct direction limited(uint64_t iops, uint64_t bps)
{
	struct direction d;

	memset(&d, 0, sizeof d);
	bucket_set_rate(&d.ops, iops, 0);
	bucket_set_rate(&d.bytes, bps, 0);
	return d;
}

/* Expects `what`, a closed loop of `bytes` requests for `seconds`, to admit min..max requests. */
static void expect_count(const char *what, struct direction d, uint64_t bytes, double seconds, double min, double max)
{
	char line[160];
	double n = admitted(&d, bytes, seconds, 0);

	snprintf(line, sizeof line, "%s: %.0f requests", what, n);
	expect(n >= min && n <= max, line);
}

int main(void)
{
	struct direction d;
	double n;
	char what[160];

	/* 300 IOPS: 10 s give 3000 requests, plus at most one bucket (300). */
	expect_count("300 IOPS for 10 s", limited(300, 0), 4096, 10, 3000, 3301);
	/* 2 MB/s in 64 KiB requests: 20 MB in 10 s = 305 requests, plus one bucket (2 MB). */
	expect_count("2 MB/s in 64 KiB for 10 s", limited(0, 2000000), 65536, 10, 305, 337);
	/* Requests larger than the bucket (1 MiB at 1 MB/s, bucket 1 MB) still average the rate: 19-20 in 20 s. */
	expect_count("1 MB/s in 1 MiB requests for 20 s", limited(0, 1000000), 1 << 20, 20, 18, 21);
	/* Both limits: the tighter one rules (100 IOPS of 64 KiB = 6.5 MB/s against 1 MB/s: 152 in 10 s). */
	expect_count("100 IOPS and 1 MB/s in 64 KiB for 10 s (bytes rule)", limited(100, 1000000), 65536, 10, 152, 168);

	/* A server that could not run for 0.8 s (a stalled guest) makes it up within the bucket. */
	d = limited(300, 0);
	n = admitted(&d, 4096, 5, 0);
	n += admitted(&d, 4096, 4.2, (uint64_t)(5.8 * NS));
	snprintf(what, sizeof what, "300 IOPS, 10 s with a 0.8 s stall: %.0f requests", n);
	expect(n >= 3000 && n <= 3301, what);

	/* Unlimited admits at once, every time. */
	d = limited(0, 0);
	expect(direction_admit(&d, 1 << 20, 0) == 0 && direction_admit(&d, 1 << 20, 0) == 0, "unlimited never waits");

	/* A live change: 300 then 150 IOPS, each for 10 s. */
	d = limited(300, 0);
	admitted(&d, 4096, 10, 0);
	bucket_set_rate(&d.ops, 150, 10 * NS);
	n = admitted(&d, 4096, 10, 10 * NS);
	snprintf(what, sizeof what, "after 300 -> 150 IOPS, 10 s: %.0f requests", n);
	expect(n >= 1480 && n <= 1651, what);

	/* Lifting a limit then setting one again starts with a full bucket, not a debt. */
	bucket_set_rate(&d.ops, 0, 20 * NS);
	bucket_set_rate(&d.ops, 10, 21 * NS);
	expect(direction_admit(&d, 4096, 21 * NS) == 0, "a new limit starts with a full bucket");

	return failures ? 1 : 0;
}
