// Types and calls of the Sluice REST API (see /api/v1/openapi.json).

import { credential, rejected, type Credential } from "./auth";

export interface Sparkline {
  rows_in_per_s: number[];
  rows_out_per_s: number[];
}

export interface PipelineSummary {
  name: string;
  id: number;
  kind: string;
  state: string;
  since_ms: number;
  /** The running version (1 until an ALTER PIPELINE changes it). */
  version: number;
  /** When the running version started: its CREATE or its ALTER. */
  changed_ms: number;
  rows_in: number;
  rows_out: number;
  rows_in_per_s: number;
  rows_out_per_s: number;
  late_rows_dropped: number;
  watermark_ms: number | null;
  watermark_lag_ms: number | null;
  error: string | null;
  errors: number;
  sql: string;
  sparkline: Sparkline;
}

export interface InstanceMetrics {
  operator: number;
  instance: number;
  /** The worker running the instance ("local" in the playground); null when not placed. */
  worker: string | null;
  kind: string;
  rows_in: number;
  rows_out: number;
  late_rows_dropped: number;
  queued_rows: number;
  backpressure_us: number;
  state_groups: number;
  watermark_ms: number | null;
  watermark_lag_ms: number | null;
  rows_in_per_s: number;
  rows_out_per_s: number;
  backpressure_share: number;
  /** Share of the last seconds the task ran on a worker (Flink's busy time). */
  busy_share: number;
  /** The longest single poll of the task since it started, µs. */
  poll_max_us: number;
}

export interface OperatorMetrics {
  rows_in: number;
  rows_out: number;
  late_rows_dropped: number;
  queued_rows: number;
  state_groups: number;
  rows_in_per_s: number;
  rows_out_per_s: number;
  backpressure_share: number;
  busy_share: number;
  watermark_ms: number | null;
  watermark_lag_ms: number | null;
}

export interface DagOperator {
  id: number;
  /** The operator's stable identity (16 hex digits). */
  uid: string;
  kind: string;
  parallelism: number;
  detail: string;
  columns: { name: string; type: string }[];
  metrics?: OperatorMetrics;
  instances?: InstanceMetrics[];
}

export interface DagEdge {
  id: number;
  from: number;
  to: number;
  partitioning: string;
  /** The downstream operator runs in the upstream's task (operator chaining). */
  chained: boolean;
}

export interface Dag {
  operators: DagOperator[];
  edges: DagEdge[];
}

export interface PipelineError {
  time_ms: number;
  operator: number;
  instance: number;
  message: string;
}

/** What an ALTER can do to an operator (a diff line's `change`). */
export const CHANGES = ["kept", "replaced", "added", "removed"] as const;
export type Change = (typeof CHANGES)[number];

/** One operator of a version's diff from the version before it. */
export interface DiffLine {
  /** Its id in the version's DAG (in the previous one's when removed). */
  operator: number;
  /** Short uids (8 hex digits); null when added (old) or removed (new). */
  uid: string | null;
  old_uid: string | null;
  kind: string;
  change: Change;
  /** What happens to its state: none, kept, moved, reset, fresh, dropped. */
  state: string;
  parallelism: number;
  old_parallelism: number | null;
  detail: string;
}

export interface PipelineVersion {
  version: number;
  sql: string;
  created_ms: number;
  /** The ALTER PIPELINE statement that made it; null for version 1. */
  changed_by: string | null;
  /** Empty for version 1. */
  diff: DiffLine[];
}

export interface PipelineDetail {
  pipeline: PipelineSummary;
  dag: Dag;
  tasks: InstanceMetrics[];
  errors: PipelineError[];
  versions: PipelineVersion[];
}

export interface OperatorHistory {
  id: number;
  kind: string;
  t_ms: number[];
  rows_in_per_s: number[];
  rows_out_per_s: number[];
  backpressure_share: number[];
  queued_rows: number[];
  watermark_lag_ms: (number | null)[];
}

export interface History {
  interval_ms: number;
  pipeline: { t_ms: number[]; rows_in_per_s: number[]; rows_out_per_s: number[] };
  operators: OperatorHistory[];
}

/** A master: its control address (absent in the playground, where the
 * master and its one worker share the process). */
export interface ClusterMaster {
  id: string;
  address?: string;
  role: string;
  health: string;
}

/**
 * A worker. A cluster master lists its registered workers (health
 * `healthy`, `late` or `draining`, with slots used, labels and process
 * metrics); the playground lists its one in-process worker (health `ok`,
 * `stale` or `starting`, with its running tasks). A worker declared dead is
 * no longer listed there but in `lost_workers`.
 */
export interface ClusterWorker {
  id: string;
  health: string;
  slots: number;
  heartbeat_age_ms: number | null;
  /** Cluster only. */
  data_address?: string;
  used_slots?: number;
  labels?: Record<string, string>;
  rss_bytes?: number;
  /** CPU time the worker process has used, ns. */
  cpu_ns?: number;
  data_bytes_sent?: number;
  data_bytes_received?: number;
  /** Time its tasks' senders waited for remote credits, ns. */
  credit_wait_ns?: number;
  /** Playground only. */
  tasks?: number;
  pipelines_running?: number;
}

/** A worker the master stopped listing lately and that is not back (cluster only, at most 64). */
export interface LostWorker {
  id: string;
  data_address: string;
  slots: number;
  labels: Record<string, string>;
  lost_at_ms: number;
  why: string;
}

export interface Cluster {
  version: string;
  uptime_ms: number;
  masters: ClusterMaster[];
  workers: ClusterWorker[];
  lost_workers?: LostWorker[];
}

/** The worker id task instances carry in the playground (one process). */
export const LOCAL_WORKER = "local";

/** The playground: one process, no master control address. */
export function singleProcess(c: Cluster): boolean {
  return c.masters.every((m) => m.address === undefined);
}

export interface SqlResult {
  tag: string;
  rows_affected?: number | null;
  columns?: { name: string; type: string }[];
  rows?: (string | null)[][];
  truncated?: boolean;
}

/** An API error: the server's message and, for SQL, its SQLSTATE. */
export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly sqlstate?: string,
    readonly results?: SqlResult[],
  ) {
    super(message);
  }

  /** The caller's role lacks a privilege: 403, or SQLSTATE 42501 in a result. */
  get denied(): boolean {
    return this.status === 403 || this.sqlstate === INSUFFICIENT_PRIVILEGE;
  }
}

/** The SQLSTATE of a statement refused for a missing privilege. */
export const INSUFFICIENT_PRIVILEGE = "42501";

/**
 * What a page shows for a failed call: a refusal (403, 42501) as
 * "Permission denied …" (the role is signed in but may not do this: not a
 * reason to sign in again), anything else by its message.
 */
export function errorText(e: unknown): string {
  if (!(e instanceof ApiError)) return String(e);
  return e.denied ? deniedText(e.message) : e.message;
}

/** "Permission denied …" from a server message (which usually starts so). */
export function deniedText(message: string): string {
  return /^permission denied/i.test(message) ? `P${message.slice(1)}` : `Permission denied: ${message}`;
}

/**
 * Marks every request as a script's (`X-Requested-With: XMLHttpRequest`):
 * the server then answers a 401 with a `Bearer` challenge instead of
 * `Basic`, so the browser opens no login dialog of its own over the
 * dashboard's form (crates/sluice-server/src/http_auth.rs).
 */
const SCRIPT_REQUEST: Record<string, string> = { "x-requested-with": "XMLHttpRequest" };

/**
 * Sends a request with `as`'s Authorization header (by default the one
 * held). `credentials: "omit"`: no cookies, and no credentials the browser
 * may have cached for this origin (from its own login dialog on an API URL
 * opened directly), so only what the user gave the dashboard is sent. A 401
 * tells the auth module, which asks the user.
 */
async function send(method: string, path: string, body?: unknown, as: Credential | null = credential(), signal?: AbortSignal): Promise<Response> {
  const headers: Record<string, string> = { ...SCRIPT_REQUEST };
  if (body !== undefined) headers["content-type"] = "application/json";
  if (as !== null) headers.authorization = as.authorization;
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit",
    cache: "no-store",
    signal,
  });
  if (response.status === 401) rejected(as);
  return response;
}

async function failure(response: Response): Promise<ApiError> {
  const json = await response.json().catch(() => ({ error: response.statusText }));
  return new ApiError(json.error ?? response.statusText, response.status, json.sqlstate, json.results);
}

async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
  const response = await send(method, path, body);
  if (response.status === 204) return undefined as T;
  if (!response.ok) throw await failure(response);
  return (await response.json()) as T;
}

/** One server-sent event: its name and its data (JSON text). */
export type StreamEvent = { event: string; data: string };

/**
 * POST `body` to `path` and read its server-sent events through fetch (EventSource cannot send an
 * Authorization header), each passed to `on` as it arrives; resolves when
 * the server ends the stream, rejects on a failed request or when `signal`
 * aborts it.
 */
async function events(path: string, body: unknown, on: (e: StreamEvent) => void, signal: AbortSignal): Promise<void> {
  const response = await send("POST", path, body, credential(), signal);
  if (!response.ok || response.body === null) throw await failure(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    // Events end at a blank line; `:` lines are keep-alive comments.
    let end: number;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      const data: string[] = [];
      for (const raw of block.split("\n")) {
        const line = raw.endsWith("\r") ? raw.slice(0, -1) : raw;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") event = text;
        else if (field === "data") data.push(text);
      }
      if (data.length > 0) on({ event, data: data.join("\n") });
    }
  }
}

export const api = {
  cluster: () => call<Cluster>("GET", "/api/v1/cluster"),
  pipelines: () => call<{ pipelines: PipelineSummary[] }>("GET", "/api/v1/pipelines"),
  pipeline: (name: string) => call<PipelineDetail>("GET", `/api/v1/pipelines/${encodeURIComponent(name)}`),
  history: (name: string) => call<History>("GET", `/api/v1/pipelines/${encodeURIComponent(name)}/history`),
  pause: (name: string) => call<void>("POST", `/api/v1/pipelines/${encodeURIComponent(name)}/pause`),
  resume: (name: string) => call<void>("POST", `/api/v1/pipelines/${encodeURIComponent(name)}/resume`),
  drop: (name: string) => call<void>("DELETE", `/api/v1/pipelines/${encodeURIComponent(name)}`),
  sql: (sql: string) => call<{ results: SqlResult[] }>("POST", "/api/v1/sql", { sql }),
  explain: (sql: string) => call<{ dag: Dag }>("POST", "/api/v1/explain", { sql }),
  /**
   * The live preview of `sql` (POST /api/v1/sql/stream: the statement in
   * the body, never in a URL a proxy or log could keep): command, columns,
   * rows, end, error events.
   */
  preview: (sql: string, on: (e: StreamEvent) => void, signal: AbortSignal) =>
    events("/api/v1/sql/stream", { sql }, on, signal),
  /**
   * Whether the server accepts `candidate` (the login form's): the status
   * of a cheap authenticated GET made with it. Its 401 does not touch the
   * credential held.
   */
  accepts: async (candidate: Credential): Promise<number> => (await send("GET", "/api/v1/cluster", undefined, candidate)).status,
};
