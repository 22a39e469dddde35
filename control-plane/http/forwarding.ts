// The two ends of a forwarded request in a route (control-plane/agents/session-routing.ts): the
// caller's request as a forward needs it, and the holder's answer sent back as it came.
import type { Context } from 'koa';
import type { CallerRequest, ForwardedAnswer } from '../agents/session-routing.js';

/** The request being handled, for a forward; its signal aborts when the caller goes away first. */
export function callerOf(ctx: Context, body?: unknown): CallerRequest {
  const abort = new AbortController();
  ctx.res.once('close', () => {
    if (!ctx.res.writableFinished) abort.abort(new Error('the client went away'));
  });
  return {
    method: ctx.method,
    url: ctx.originalUrl,
    headers: ctx.headers,
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    signal: abort.signal,
  };
}

/** Answers with the forwarded status, headers and body; a body cut short cuts this answer too. */
export function answerForwarded(ctx: Context, answer: ForwardedAnswer): void {
  ctx.status = answer.status;
  for (const [name, value] of Object.entries(answer.headers)) ctx.set(name, value);
  if (!answer.body) return;
  answer.body.once('error', () => ctx.res.destroy());
  ctx.body = answer.body;
}
