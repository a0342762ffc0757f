// Talking to the Genesis API: JSON requests, readable errors, reconnecting WebSockets, and a
// tiny DOM builder (text goes through textContent only: API data is never parsed as HTML).

export async function request(path, { method = "GET", body, apiKey, operatorKey } = {}) {
  const headers = {};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (apiKey) headers["X-API-Key"] = apiKey;
  if (operatorKey) headers["X-Operator-Key"] = operatorKey;
  let response;
  try {
    response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (err) {
    return { ok: false, status: 0, data: { error: "NETWORK_ERROR", detail: `the API could not be reached (${err.message})` } };
  }
  let data = null;
  try { data = await response.json(); } catch { data = { error: "NOT_JSON", detail: `${response.status} ${response.statusText}` }; }
  return { ok: response.ok, status: response.status, data };
}

// The API's error shape {"error", "detail", "errors"?: [{field, message}], "retry_after_sec"?}
// as a title line and a list of details.
export function describeError({ status, data }) {
  const title = `${status || "no answer"} ${data?.error ?? "ERROR"}`;
  const lines = [];
  if (data?.detail) lines.push(String(data.detail));
  for (const e of data?.errors ?? []) lines.push(`${e.field}: ${e.message}`);
  if (data?.retry_after_sec != null) lines.push(`retry after ${data.retry_after_sec} s`);
  return { title, lines };
}

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value == null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child == null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// Show a message box: {title, lines, kind: "ok" | "error" | undefined}.
export function showMessage(box, { title, lines = [], kind }) {
  box.hidden = false;
  box.className = `message${kind ? " " + kind : ""}`;
  // replaceChildren turns a null into the text "null": pass only the nodes there are
  const nodes = [el("strong", { text: title })];
  if (lines.length) nodes.push(el("ul", {}, lines.map((l) => el("li", { text: l }))));
  box.replaceChildren(...nodes);
}

export function wsUrl(path) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}${path}`;
}

// A WebSocket that reconnects with backoff (1 s doubling to 10 s). Handlers: onMessage(data),
// onState("live" | "down"), onOpen() (each (re)connection, e.g. to fill a gap).
export function reconnectingSocket(path, { onMessage, onState = () => {}, onOpen = () => {} }) {
  let delay = 1000;
  const connect = () => {
    const socket = new WebSocket(wsUrl(path));
    socket.onopen = () => { delay = 1000; onState("live"); onOpen(); };
    socket.onmessage = (event) => onMessage(event.data);
    socket.onclose = () => {
      onState("down");
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 10000);
    };
  };
  connect();
}

export function timeOf(seconds) {
  return new Date(seconds * 1000).toLocaleTimeString();
}
