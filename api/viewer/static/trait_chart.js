// Carriers per trait over ticks, from the stored history (GET /api/world/history): one line per
// trait, in the trait's colour in the world, for the most carried traits of the span shown.

import { drawAxes, drawLine, drawWaiting, niceTop } from "./axes.js";
import { el } from "./api.js";
import { traitColour } from "./world.js";

const MAX_SERIES = 8;
const PAD = { l: 48, r: 16, t: 26, b: 34 };

export class TraitChart {
  // onTrait(traitName): a legend entry was clicked.
  constructor(canvas, legend, onTrait = () => {}) {
    Object.assign(this, { canvas, legend, onTrait });
    this.ctx = canvas.getContext("2d");
    this.points = [];
    this.series = [];  // the traits drawn, most carried first
    this.axes = null;
  }

  setHistory(points) {
    this.points = points;
    this.draw();
  }

  draw() {
    const { ctx, canvas, points } = this;
    const peak = new Map();
    for (const p of points) for (const [name, n] of Object.entries(p.trait_usage)) peak.set(name, Math.max(peak.get(name) ?? 0, n));
    const names = [...peak.entries()].filter(([, n]) => n > 0).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
    this.series = names.slice(0, MAX_SERIES).map(([name]) => name);
    if (points.length < 2 || !this.series.length) {
      drawWaiting(ctx, canvas, points.length < 2 ? "waiting for the world's snapshots…" : "no Molbot has carried a trait in this span yet");
      this.axes = null;
      this.renderLegend(names.length);
      return;
    }
    const axes = drawAxes(ctx, canvas, {
      pad: PAD,
      x: { min: points[0].tick, max: points[points.length - 1].tick, title: "tick" },
      left: { max: niceTop(peak.get(this.series[0]), 5), title: "carriers" },
    });
    for (const name of [...this.series].reverse()) {  // the most carried on top
      drawLine(ctx, points, (p) => axes.x(p.tick), (p) => axes.left(p.trait_usage[name] ?? 0), traitColour(name));
    }
    this.axes = { labels: axes.labels, titles: axes.titles };
    this.renderLegend(names.length);
  }

  renderLegend(total) {
    const latest = this.points[this.points.length - 1]?.trait_usage ?? {};
    const entries = this.series.map((name) => el("li", { "data-trait-name": name },
      el("i", { style: `background:${traitColour(name)}` }),
      el("button", { type: "button", class: "link", title: "versions and verdicts of this trait", text: name, onclick: () => this.onTrait(name) }),
      ` ${latest[name] ?? 0}`));
    if (total > this.series.length) entries.push(el("li", { class: "note", text: `and ${total - this.series.length} more` }));
    this.legend.replaceChildren(...entries);
  }
}
