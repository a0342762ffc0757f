// The world's history for the charts: GET /api/world/history once (up to 1,000 WorldSnapshots
// of the running engine), then every few seconds the snapshots after the newest one held. A new
// engine run (another run_id) starts the history over.

import { describeError, request } from "./api.js";

const POLL_MS = 3000;
const LIMIT = 1000;
const KEEP = 2000;

export class WorldHistory {
  constructor(note) {
    this.note = note;
    this.runId = null;
    this.points = [];
    this.listeners = [];
  }

  onChange(listener) { this.listeners.push(listener); }

  start() { this.poll(); }

  async poll() {
    const params = new URLSearchParams({ limit: String(LIMIT) });
    const last = this.points[this.points.length - 1];
    if (last) params.set("from_tick", String(last.tick + 1));
    const answer = await request(`/api/world/history?${params}`);
    if (answer.ok) {
      this.note.textContent = "";
      const { run_id: runId, points } = answer.data;
      if (runId !== this.runId) {
        this.runId = runId;
        this.points = [];
        if (last) return this.poll();  // a new run: read its history from its start
      }
      if (points.length || !last) {
        this.points = this.points.concat(points.filter((p) => !last || p.tick > last.tick)).slice(-KEEP);
        for (const listener of this.listeners) listener(this.points);
      }
    } else {
      const { title, lines } = describeError(answer);
      this.note.textContent = `history unavailable: ${title} ${lines.join("; ")}`;
    }
    setTimeout(() => this.poll(), POLL_MS);
  }
}
