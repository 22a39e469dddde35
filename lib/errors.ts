// One registry of coded errors, mapped once to HTTP status and gRPC status.
// Every code here must be documented in docs/errors.md (a test enforces it).
// The wire body is `{"error": msg, "code": <gRPC code>, "message": msg}` (wire-conventions §3).

/** gRPC status codes (numbers are the wire values clients read in `code`). */
export const GrpcCode = {
  OK: 0,
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  ALREADY_EXISTS: 6,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  ABORTED: 10,
  OUT_OF_RANGE: 11,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  DATA_LOSS: 15,
  UNAUTHENTICATED: 16,
} as const;
export type GrpcCodeNumber = (typeof GrpcCode)[keyof typeof GrpcCode];

/** The HTTP status for each gRPC code, as the API's clients map them (wire-conventions §3). */
const httpStatusOfGrpc: Record<GrpcCodeNumber, number> = {
  0: 200,
  1: 499,
  2: 500,
  3: 400,
  4: 504,
  5: 404,
  6: 409,
  7: 403,
  8: 429,
  9: 412,
  10: 409,
  11: 400,
  12: 501,
  13: 500,
  14: 503,
  15: 500,
  16: 401,
};

export function httpStatusFor(grpc: GrpcCodeNumber): number {
  return httpStatusOfGrpc[grpc];
}

/** The HTTP status of a registry code: its own where it has one, else its gRPC code's. */
export function httpStatusOf(code: ErrorCode): number {
  const definition: ErrorDefinition = errorRegistry[code];
  return definition.http ?? httpStatusFor(definition.grpc);
}

interface ErrorDefinition {
  readonly grpc: GrpcCodeNumber;
  /** Short description for docs/errors.md; the message of each instance says the specifics. */
  readonly summary: string;
  /**
   * The HTTP status, where it is not the gRPC code's (errors of the HTTP edge itself, which
   * have their own HTTP statuses: 408, 413, 415, 417, 431).
   */
  readonly http?: number;
}

/** Every coded error Strata raises. Keys are the stable codes (logged, documented). */
export const errorRegistry = {
  INVALID_ARGUMENT: { grpc: GrpcCode.INVALID_ARGUMENT, summary: 'A request field or query parameter is missing or invalid.' },
  INVALID_JSON: { grpc: GrpcCode.INVALID_ARGUMENT, summary: 'The request body is not valid JSON or is not an object.' },
  BODY_TOO_LARGE: { grpc: GrpcCode.INVALID_ARGUMENT, summary: 'The request body exceeds the size limit.' },
  TOO_MANY_FILTERS: { grpc: GrpcCode.INVALID_ARGUMENT, summary: 'More than one mutually exclusive filter was given.' },
  INVALID_STATE: { grpc: GrpcCode.INVALID_ARGUMENT, summary: 'The object is in a state that forbids the operation (for example Deleting or Failed).' },
  NOT_FOUND: { grpc: GrpcCode.NOT_FOUND, summary: 'The addressed object does not exist.' },
  ROUTE_NOT_FOUND: { grpc: GrpcCode.NOT_FOUND, summary: 'No API route matches the method and path.' },
  ALREADY_EXISTS: { grpc: GrpcCode.ALREADY_EXISTS, summary: 'An object with that name or key already exists.' },
  OPERATION_IN_PROGRESS: { grpc: GrpcCode.ABORTED, summary: 'Another operation is already in progress on the object.' },
  PERMISSION_DENIED: { grpc: GrpcCode.PERMISSION_DENIED, summary: 'The token is valid but does not allow the operation (an API token lacks the role; an agent token does not cover the server or node claimed).' },
  UNAUTHENTICATED: { grpc: GrpcCode.UNAUTHENTICATED, summary: 'The token (API or agent) is missing, malformed, expired, or cannot be verified.' },
  INVALID_PRECONDITION: { grpc: GrpcCode.INVALID_ARGUMENT, summary: 'The If-Match header is not a list of entity tags.' },
  UNSUPPORTED_MEDIA_TYPE: { grpc: GrpcCode.INVALID_ARGUMENT, http: 415, summary: 'The request body is not JSON (its Content-Type is neither application/json nor a +json type).' },
  MALFORMED_REQUEST: { grpc: GrpcCode.INVALID_ARGUMENT, summary: 'The HTTP request itself is malformed (request line, header syntax, framing); answered before any route runs.' },
  HEADERS_TOO_LARGE: { grpc: GrpcCode.INVALID_ARGUMENT, http: 431, summary: 'The request headers exceed the server\'s header size limit.' },
  CHUNK_EXTENSIONS_TOO_LARGE: { grpc: GrpcCode.INVALID_ARGUMENT, http: 413, summary: 'The chunk extensions of a chunked request body exceed the server\'s limit.' },
  REQUEST_TIMEOUT: { grpc: GrpcCode.DEADLINE_EXCEEDED, http: 408, summary: 'The request headers or body did not arrive within the server\'s time limits.' },
  ETAG_MISMATCH: { grpc: GrpcCode.FAILED_PRECONDITION, summary: 'The If-Match ETag does not match the current version of the object.' },
  TOO_MANY_REQUESTS: { grpc: GrpcCode.RESOURCE_EXHAUSTED, summary: 'Too many commands are in progress.' },
  UNIMPLEMENTED: { grpc: GrpcCode.UNIMPLEMENTED, summary: 'The capability is not implemented.' },
  TRANSIENT_STATE: { grpc: GrpcCode.UNAVAILABLE, summary: 'The object is in a temporary state (Creating or Updating) that forbids the operation.' },
  UNAVAILABLE: { grpc: GrpcCode.UNAVAILABLE, summary: 'A dependency (etcd, an agent) cannot be reached now; retry later.' },
  NOT_LEADER: { grpc: GrpcCode.FAILED_PRECONDITION, summary: 'A leader-only write was refused because this process no longer holds leadership.' },
  FEDERATION_UNAVAILABLE: { grpc: GrpcCode.INTERNAL, summary: 'Cluster-federation operations are reserved and their service is unavailable (spec 4.3).' },
  KERNEL_CAPABILITY_MISSING: { grpc: GrpcCode.INVALID_ARGUMENT, summary: 'The request needs a kernel capability that the kernel of some involved node lacks (or its agent never reported); the message names the nodes.' },
  CONFIG_INVALID: { grpc: GrpcCode.INVALID_ARGUMENT, summary: 'The process configuration (file, environment, flags) is invalid.' },
  INTERNAL: { grpc: GrpcCode.INTERNAL, summary: 'An unexpected internal error; the log has the details.' },
} as const satisfies Record<string, ErrorDefinition>;

export type ErrorCode = keyof typeof errorRegistry;

export class StrataError extends Error {
  readonly code: ErrorCode;
  readonly grpc: GrpcCodeNumber;
  readonly httpStatus: number;
  readonly details: unknown[];

  constructor(code: ErrorCode, message: string, options: { cause?: unknown; details?: unknown[] } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'StrataError';
    this.code = code;
    this.grpc = errorRegistry[code].grpc;
    this.httpStatus = httpStatusOf(code);
    this.details = options.details ?? [];
  }

  /** The JSON error body of wire-conventions §3. */
  toWire(): { error: string; code: number; message: string; details?: unknown[] } {
    const body: { error: string; code: number; message: string; details?: unknown[] } = {
      error: this.message,
      code: this.grpc,
      message: this.message,
    };
    if (this.details.length > 0) body.details = this.details;
    return body;
  }
}

/** The longest client-given value an error message repeats; longer ones are cut (issue 17). */
export const QUOTE_MAX_CHARS = 80;

/** A client-given value as an error message may repeat it: at most QUOTE_MAX_CHARS characters. */
export function quote(value: string): string {
  return value.length <= QUOTE_MAX_CHARS ? value : `${value.slice(0, QUOTE_MAX_CHARS)}… (${value.length} characters)`;
}

/** Shorthand constructors used across the code base. */
export const errors = {
  invalid: (message: string, details?: unknown[]) =>
    new StrataError('INVALID_ARGUMENT', message, details ? { details } : {}),
  notFound: (what: string, id: string) => new StrataError('NOT_FOUND', `${what} ${quote(id)} not found`),
  exists: (what: string, id: string) => new StrataError('ALREADY_EXISTS', `${what} ${quote(id)} already exists`),
  unauthenticated: (message: string) => new StrataError('UNAUTHENTICATED', message),
  denied: (message: string) => new StrataError('PERMISSION_DENIED', message),
  etagMismatch: (what: string, id: string) =>
    new StrataError('ETAG_MISMATCH', `${what} ${quote(id)} was modified (ETag mismatch)`),
  unavailable: (message: string, cause?: unknown) => new StrataError('UNAVAILABLE', message, { cause }),
  internal: (message: string, cause?: unknown) => new StrataError('INTERNAL', message, { cause }),
};

/** Converts anything thrown into a StrataError; unknown errors become INTERNAL without leaking internals. */
export function toStrataError(err: unknown): StrataError {
  if (err instanceof StrataError) return err;
  if (isEtcdUnavailable(err)) return errors.unavailable('the cluster store (etcd) is unavailable', err);
  return errors.internal('internal error', err);
}

function isEtcdUnavailable(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  // etcd3 typed errors (GRPCUnavailableError, GRPCDeadlineExceededError, ClientRuntimeError when
  // no host answers), and cockatiel's BrokenCircuitError while etcd3 skips a failing host.
  return /GRPCUnavailable|GRPCDeadlineExceeded|ClientRuntimeError|GRPCConnectFailed|BrokenCircuit/.test(err.constructor.name) ||
    (err as { isBrokenCircuitError?: boolean }).isBrokenCircuitError === true;
}
