// What a command prints. stdout carries the result only (a table, fields, or the API's JSON with
// --output json), so it can be piped; notes, progress and errors go to stderr.
import { formatSize } from './units.js';

export type OutputFormat = 'table' | 'json';

export interface Column<Row> {
  readonly header: string;
  readonly value: (row: Row) => string;
}

export interface Printer {
  readonly format: OutputFormat;
  /** Print byte counts raw instead of in binary units (--bytes). */
  readonly rawBytes: boolean;
  /** A result line (stdout). */
  line(text: string): void;
  /** A note or progress line for the human (stderr). */
  note(text: string): void;
  /** The API's JSON, as received (stdout). */
  json(value: unknown): void;
  table<Row>(rows: readonly Row[], columns: readonly Column<Row>[], emptyNote: string): void;
  /** A list command's result: the API's answer as JSON with --output json, else the rows as a table. */
  list<Row>(answer: unknown, rows: readonly Row[], columns: readonly Column<Row>[], emptyNote: string): void;
  fields(pairs: readonly (readonly [string, string])[]): void;
  /** A command's result that is not an object to show (a delete, an action): the API's JSON with --output json, else `text`. */
  done(answer: unknown, text: string): void;
  size(bytes: string | bigint | number | undefined): string;
}

export function createPrinter(format: OutputFormat, rawBytes: boolean, stdout: NodeJS.WritableStream = process.stdout, stderr: NodeJS.WritableStream = process.stderr): Printer {
  return {
    format,
    rawBytes,
    line: (text) => void stdout.write(`${text}\n`),
    note: (text) => void stderr.write(`${text}\n`),
    json: (value) => void stdout.write(`${JSON.stringify(value, null, 2)}\n`),
    table(rows, columns, emptyNote) {
      if (rows.length === 0) {
        stderr.write(`${emptyNote}\n`);
        return;
      }
      stdout.write(renderTable(rows, columns));
    },
    list(answer, rows, columns, emptyNote) {
      if (format === 'json') this.json(answer);
      else this.table(rows, columns, emptyNote);
    },
    fields(pairs) {
      const width = Math.max(...pairs.map(([label]) => label.length)) + 1;
      stdout.write(pairs.map(([label, value]) => `${`${label}:`.padEnd(width)}  ${value}`.trimEnd()).join('\n') + '\n');
    },
    done(answer, text) {
      if (format === 'json') this.json(answer);
      else this.line(text);
    },
    size(bytes) {
      if (bytes === undefined || bytes === '') return '-';
      return rawBytes ? String(bytes) : formatSize(bytes);
    },
  };
}

/** Left-aligned columns two spaces apart; cell text on one line; no trailing spaces. */
export function renderTable<Row>(rows: readonly Row[], columns: readonly Column<Row>[]): string {
  const cells = rows.map((row) => columns.map((column) => oneLine(column.value(row))));
  const widths = columns.map((column, i) => Math.max(column.header.length, ...cells.map((r) => r[i]!.length)));
  const render = (values: readonly string[]) => values.map((v, i) => v.padEnd(widths[i]!)).join('  ').trimEnd();
  return [render(columns.map((c) => c.header)), ...cells.map(render)].join('\n') + '\n';
}

function oneLine(text: string): string {
  return text.replace(/\s+/g, ' ').trim() || '-';
}

/** An RFC 3339 time to the second, UTC ("2024-05-01 12:00:00Z"); '-' when absent. */
export function formatTime(value: string | null | undefined): string {
  if (!value) return '-';
  const ms = Date.parse(value);
  if (Number.isNaN(ms)) return value;
  return new Date(ms).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

/** "a, b, c", or '-' for none. */
export function list(values: readonly string[] | undefined): string {
  return values && values.length > 0 ? values.join(', ') : '-';
}
