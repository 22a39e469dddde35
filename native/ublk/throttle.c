#include "throttle.h"

static void refill(struct bucket *b, uint64_t now)
{
	if (now > b->last) {
		b->tokens += (double)b->rate * (double)(now - b->last) / 1e9;
		if (b->tokens > b->cap)
			b->tokens = b->cap;
	}
	b->last = now;
}

void bucket_set_rate(struct bucket *b, uint64_t rate, uint64_t now)
{
	uint64_t previous = b->rate;

	if (previous != 0)
		refill(b, now);
	b->rate = rate;
	b->last = now;
	if (rate == 0)
		return;
	b->cap = (double)rate * THROTTLE_BURST_SECONDS;
	if (b->cap < 1)
		b->cap = 1;
	if (previous == 0 || b->tokens > b->cap)
		b->tokens = b->cap;
}

/*
 * What a request needs in the bucket before it may go: its cost, or a full bucket when it costs
 * more than the bucket holds (it then leaves the bucket in debt, paid back before the next one).
 */
static double needed(const struct bucket *b, double cost)
{
	return cost < b->cap ? cost : b->cap;
}

/* ns until the bucket holds `need`, 0 if it does. */
static uint64_t wait_for(const struct bucket *b, double need)
{
	double missing = need - b->tokens;

	if (b->rate == 0 || missing <= 0)
		return 0;
	/* +1 ns: never wake up a hair too early and spin. */
	return (uint64_t)(missing * 1e9 / (double)b->rate) + 1;
}

uint64_t direction_admit(struct direction *d, uint64_t bytes, uint64_t now)
{
	uint64_t wait_ops, wait_bytes;

	if (d->ops.rate)
		refill(&d->ops, now);
	if (d->bytes.rate)
		refill(&d->bytes, now);
	wait_ops = wait_for(&d->ops, needed(&d->ops, 1));
	wait_bytes = wait_for(&d->bytes, needed(&d->bytes, (double)bytes));
	if (wait_ops || wait_bytes)
		return wait_ops > wait_bytes ? wait_ops : wait_bytes;
	if (d->ops.rate)
		d->ops.tokens -= 1;
	if (d->bytes.rate)
		d->bytes.tokens -= (double)bytes;
	return 0;
}
