// Lists that page by UUID (volumes, snapshots; wire-conventions §4): `limit` (default and maximum
// 1000) and `offsetUUID` (the page starts after it). A client that pages until an empty page sees
// every object that exists throughout exactly once, whatever is created meanwhile.
import type { ApiClient, Query } from './api-client.js';
import { UsageError } from './errors.js';

/** The API's page size when no limit is sent. */
export const API_PAGE_SIZE = 1000;

export interface ListPagesOptions {
  readonly allPages: boolean;
  readonly limit?: number | undefined;
}

export interface ListedPages<Item> {
  readonly items: Item[];
  /** The API's answer: the only page, or (with allPages) the pages' items under the same key. */
  readonly answer: Record<string, unknown>;
  /** Without allPages: the page was full, so more may follow. */
  readonly mayHaveMore: boolean;
}

export async function listPages<Item extends { UUID: string }>(
  client: ApiClient,
  path: string,
  /** The answer's array key: "volumes", "snapshots". */
  key: string,
  query: Query,
  options: ListPagesOptions,
): Promise<ListedPages<Item>> {
  const pageOf = async (offsetUUID: string | undefined) => {
    const answer = await client.get<Record<string, unknown>>(path, { ...query, limit: options.limit, offsetUUID });
    const items = answer[key];
    if (!Array.isArray(items)) throw new Error(`the API's answer has no "${key}" list`);
    return { answer, items: items as Item[] };
  };

  const first = await pageOf(undefined);
  if (!options.allPages) return { items: first.items, answer: first.answer, mayHaveMore: first.items.length >= (options.limit ?? API_PAGE_SIZE) };
  const items = [...first.items];
  for (let page = first.items; page.length > 0; ) {
    page = (await pageOf(page[page.length - 1]!.UUID)).items;
    items.push(...page);
  }
  return { items, answer: { ...first.answer, [key]: items }, mayHaveMore: false };
}

/** --limit: a page size of 1 to 1000. */
export function parsePageLimit(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const limit = Number(text);
  if (!Number.isInteger(limit) || limit < 1 || limit > API_PAGE_SIZE) throw new UsageError(`invalid --limit "${text}": a whole number from 1 to ${API_PAGE_SIZE}`);
  return limit;
}
