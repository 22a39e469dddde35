// The REST API of a running control plane as an admin calls it (tests that drive a whole cluster).
import assert from 'node:assert/strict';
import { checkAnswer } from './openapi-answers.js';

export interface AdminApiTarget {
  readonly apiUrl: string;
  adminToken(): string;
}

export interface AdminApi {
  /** Any answer: status, the body parsed as JSON (undefined when it is not JSON) and its text. */
  request(method: string, path: string, body?: unknown): Promise<{ status: number; json: unknown; text: string }>;
  /** A 200 answer's JSON; anything else fails the test with the answer. */
  api<T>(method: string, path: string, body?: unknown): Promise<T>;
}

/** `target` is read on every call: a test may replace its control plane (a restart). */
export function adminApi(target: () => AdminApiTarget): AdminApi {
  const request: AdminApi['request'] = async (method, path, body) => {
    const plane = target();
    const res = await fetch(`${plane.apiUrl}/api/v2${path}`, {
      method,
      headers: { Authorization: `Bearer ${plane.adminToken()}`, 'Content-Type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(30_000),
    });
    const text = await res.text();
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    checkAnswer(method, `/api/v2${path}`, { status: res.status, contentType: res.headers.get('content-type'), body: json });
    return { status: res.status, json, text };
  };
  return {
    request,
    async api<T>(method: string, path: string, body?: unknown): Promise<T> {
      const res = await request(method, path, body);
      assert.equal(res.status, 200, `${method} ${path}: ${res.status} ${res.text}`);
      return res.json as T;
    },
  };
}
