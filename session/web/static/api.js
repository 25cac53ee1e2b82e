// The page's only ways to the server: JSON requests with the bearer token, and the session's event stream
// (server-sent events read with fetch, since EventSource cannot send an Authorization header).

const TOKEN_KEY = "chat.token";

/** The bearer token, kept for this tab only (never in the URL). */
export const token = {
  get: () => sessionStorage.getItem(TOKEN_KEY),
  set: (value) => sessionStorage.setItem(TOKEN_KEY, value),
  clear: () => sessionStorage.removeItem(TOKEN_KEY),
};

/** A refused or failed request: its HTTP status, and the server's error type and message. */
export class ApiError extends Error {
  constructor(status, type, message) {
    super(message);
    this.status = status;
    this.type = type;
  }
}

let onUnauthorized = () => {};

/** Call `handler(message, refused)` whenever the server answers 401: `refused` is the token it refused (null when
 * the page had none to send). */
export function whenUnauthorized(handler) {
  onUnauthorized = handler;
}

function headers(extra) {
  const given = token.get();  // none yet: a server serving this machine without a token needs none
  return given ? { Authorization: `Bearer ${given}`, ...extra } : { ...extra };
}

async function failure(response) {
  let type = "http_error";
  let message = `the server answered ${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    if (body && body.error) {
      type = body.error.type || type;
      message = body.error.message || message;
    }
  } catch (_) {
    // not JSON: keep the status line
  }
  const error = new ApiError(response.status, type, message);
  if (response.status === 401) onUnauthorized(message, token.get());
  return error;
}

/** `method path` with an optional JSON body; the parsed JSON answer (null for an empty one). */
export async function api(method, path, body) {
  const init = { method, headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }) };
  if (body !== undefined) init.body = JSON.stringify(body);
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    throw new ApiError(0, "network", `the server could not be reached (${error.message})`);
  }
  if (!response.ok) throw await failure(response);
  const text = await response.text();
  return text ? JSON.parse(text) : null;
}

/** Splits a text/event-stream into events: `{id, event, data}` for each, as the SSE format defines. */
export class SSEParser {
  constructor(onEvent) {
    this.onEvent = onEvent;
    this.buffer = "";
    this.fields = { data: [] };
  }

  push(chunk) {
    this.buffer += chunk;
    const lines = this.buffer.split(/\r\n|\r|\n/);
    this.buffer = lines.pop();  // an unfinished line waits for the rest
    for (const line of lines) this.line(line);
  }

  line(line) {
    if (line === "") {
      const { id, event, data } = this.fields;
      this.fields = { data: [] };
      if (data.length) this.onEvent({ id, event: event || "message", data: data.join("\n") });
      return;
    }
    if (line.startsWith(":")) return;  // a comment: the server's keep-alive
    const colon = line.indexOf(":");
    const name = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (name === "data") this.fields.data.push(value);
    else if (name === "id" || name === "event") this.fields[name] = value;
  }
}

const BACKOFF = [250, 500, 1000, 2000, 4000, 8000];

/**
 * A session's live event stream. It remembers the last event id and, when the connection drops, reconnects
 * with `Last-Event-ID` (waiting longer after each failed try), so every event arrives once, in order.
 * `handlers`: `event(type, data, id)`, `status(state, detail)`, `fatal(error)`.
 */
export class EventStream {
  constructor(sessionId, handlers) {
    this.url = `/sessions/${encodeURIComponent(sessionId)}/events?branches=true`;  // the run tree draws branches too
    this.handlers = handlers;
    this.lastId = null;
    this.tries = 0;
    this.reconnects = 0;
    this.stopped = false;
    this.controller = null;
    this.timer = null;
    this.onOffline = () => this.drop("offline");
    this.onOnline = () => this.reconnectNow();
    window.addEventListener("offline", this.onOffline);
    window.addEventListener("online", this.onOnline);
  }

  start() {
    this.connect();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    window.removeEventListener("offline", this.onOffline);
    window.removeEventListener("online", this.onOnline);
    if (this.controller) this.controller.abort();
  }

  /** Drop the connection now (the browser went offline); it is made again once possible. */
  drop(why) {
    if (this.controller) this.controller.abort();
    this.handlers.status("reconnecting", why);
  }

  reconnectNow() {
    if (this.stopped) return;
    clearTimeout(this.timer);
    this.tries = 0;
    if (!this.controller) {
      this.reconnects += 1;
      this.connect();
    }
  }

  async connect() {
    if (this.stopped) return;
    const controller = new AbortController();
    this.controller = controller;
    const extra = { Accept: "text/event-stream" };
    if (this.lastId !== null) extra["Last-Event-ID"] = this.lastId;
    let failed = null;
    try {
      const response = await fetch(this.url, { headers: headers(extra), signal: controller.signal, cache: "no-store" });
      if (!response.ok) {
        const error = await failure(response);
        if (response.status === 401 || response.status === 404) {
          this.controller = null;
          this.handlers.fatal(error);
          return;
        }
        throw error;
      }
      this.handlers.status("live", this.reconnects ? `resumed after event ${this.lastId}` : "");
      await this.read(response.body.getReader());
    } catch (error) {
      failed = error;
    }
    if (this.controller === controller) this.controller = null;
    if (this.stopped) return;
    this.handlers.status("reconnecting", failed ? failed.message : "the stream ended");
    if (!navigator.onLine) return;  // "online" reconnects
    const wait = BACKOFF[Math.min(this.tries, BACKOFF.length - 1)];
    this.tries += 1;
    this.reconnects += 1;
    this.timer = setTimeout(() => this.connect(), wait);
  }

  async read(reader) {
    const decoder = new TextDecoder();
    const parser = new SSEParser((frame) => this.frame(frame));
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      parser.push(decoder.decode(value, { stream: true }));
    }
  }

  frame({ id, event, data }) {
    if (id !== undefined && id !== "") {
      // Ids rise; one already seen would be a repeat, and is never shown twice.
      if (this.lastId !== null && BigInt(id) <= BigInt(this.lastId)) return;
      this.lastId = id;
    }
    this.tries = 0;
    let parsed;
    try {
      parsed = JSON.parse(data);
    } catch (_) {
      return;
    }
    this.handlers.event(event, parsed, id);
  }
}
