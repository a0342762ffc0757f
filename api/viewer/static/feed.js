// The Evolution Feed: GET /api/feed?after=<id>&limit=n ({"messages": [...], "last_id"}) for the
// history and for gaps, WebSocket /ws/feed for each new message. An API without the feed (404)
// gets a quiet note instead.

import { describeError, el, reconnectingSocket, request, timeOf } from "./api.js";
import { workflowUrl } from "./mutations.js";

const SHOWN = 100;

// A message's timestamp (epoch seconds or an ISO 8601 string) in epoch seconds.
const seconds = (t) => (typeof t === "number" ? t : Date.parse(t) / 1000 || 0);

export class Feed {
  constructor({ list, note }, config) {
    Object.assign(this, { list, note, config });
    this.seen = new Set();
    this.lastId = null;
  }

  async start() {
    const available = await this.catchUp(50);
    if (!available) return;
    reconnectingSocket("/ws/feed", {
      onMessage: (text) => this.add(JSON.parse(text)),
      onState: (state) => { this.note.textContent = state === "live" ? "" : "feed: reconnecting…"; },
      onOpen: () => this.catchUp(SHOWN),  // messages sent while the socket was down
    });
  }

  // Read the messages after the newest one shown; false when this API has no feed.
  async catchUp(limit) {
    const params = new URLSearchParams({ limit: String(limit) });
    if (this.lastId != null) params.set("after", String(this.lastId));
    const answer = await request(`/api/feed?${params}`);
    if (answer.status === 404) {
      this.note.textContent = "Evolution Feed unavailable (this API has no /api/feed).";
      return false;
    }
    if (!answer.ok) {
      const { title, lines } = describeError(answer);
      this.note.textContent = `feed: ${title} ${lines.join("; ")}`;
      return true;
    }
    const oldestFirst = [...answer.data.messages].sort((a, b) => seconds(a.timestamp) - seconds(b.timestamp));
    for (const message of oldestFirst) this.add(message);
    if (answer.data.last_id != null) this.lastId = answer.data.last_id;
    if (!this.seen.size) this.note.textContent = "no messages yet";
    return true;
  }

  add(m) {
    if (m.id == null || this.seen.has(m.id)) return;
    this.seen.add(m.id);
    this.lastId = m.id;
    this.note.textContent = "";
    const when = m.timestamp == null ? "" : timeOf(seconds(m.timestamp));
    this.list.prepend(el("li", { "data-feed-id": String(m.id) },
      el("time", { text: when }),
      el("span", { class: "agent", text: m.agent ?? "" }),
      el("span", { class: "action", text: m.action ?? "" }),
      el("span", { text: m.message ?? "" }),
      m.workflow_id ? [" ", el("a", { href: workflowUrl(this.config, m.workflow_id), target: "_blank", rel: "noopener", text: m.mutation_id ?? "workflow ↗" })] : null,
    ));
    while (this.list.children.length > SHOWN) this.list.lastChild.remove();
  }
}
