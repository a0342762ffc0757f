// Population and average energy over ticks: the stored history (GET /api/world/history, one
// point per WorldSnapshot) followed by live samples of the viewer frames newer than its last
// point. Population uses the left scale, energy the right one (0..max energy).

import { drawAxes, drawLine, drawWaiting, niceTop } from "./axes.js";

const POPULATION = "#6cb6ff";
const ENERGY = "#e5b454";
const MAX_LIVE = 600;  // 5 minutes of live samples at two a second
const PAD = { l: 48, r: 48, t: 26, b: 34 };

export class Chart {
  constructor(canvas, { maxEnergy = 100 } = {}) {
    this.canvas = canvas;
    this.ctx = canvas.getContext("2d");
    this.maxEnergy = maxEnergy;
    this.history = [];  // {tick, population, energy}, one per WorldSnapshot
    this.live = [];     // {tick, population, energy}, from the frames
    this.axes = null;   // the labels of the last drawing
  }

  // Every sample drawn: the history, then the live samples after it.
  get samples() {
    const last = this.history.length ? this.history[this.history.length - 1].tick : -1;
    return this.history.concat(this.live.filter((s) => s.tick > last));
  }

  setHistory(points) {
    this.history = points.map((p) => ({ tick: p.tick, population: p.entity_count, energy: p.avg_energy }));
    const last = this.history.length ? this.history[this.history.length - 1].tick : -1;
    this.live = this.live.filter((s) => s.tick > last);
    this.draw();
  }

  // A live sample; one older than the last means the engine restarted: the live samples start
  // over (the history starts over when it sees the new run).
  add(sample) {
    const last = this.live[this.live.length - 1];
    if (last && sample.tick <= last.tick) {
      if (sample.tick < last.tick) this.live = [];
      else return;
    }
    this.live.push(sample);
    if (this.live.length > MAX_LIVE) this.live.shift();
    this.draw();
  }

  draw() {
    const { ctx, canvas } = this;
    const samples = this.samples;
    if (samples.length < 2) {
      drawWaiting(ctx, canvas, "waiting for the world…");
      return;
    }
    const t0 = samples[0].tick, t1 = samples[samples.length - 1].tick;
    const axes = drawAxes(ctx, canvas, {
      pad: PAD,
      x: { min: t0, max: t1, title: "tick" },
      left: { max: niceTop(Math.max(...samples.map((s) => s.population)), 10), title: "population", colour: POPULATION },
      right: { max: this.maxEnergy, title: "avg energy", colour: ENERGY },
    });
    drawLine(ctx, samples, (s) => axes.x(s.tick), (s) => axes.left(s.population), POPULATION);
    drawLine(ctx, samples, (s) => axes.x(s.tick), (s) => axes.right(s.energy), ENERGY);
    const now = samples[samples.length - 1];
    ctx.fillStyle = "#d8dde6";
    ctx.fillText(`population ${now.population} · avg energy ${now.energy.toFixed(1)}`, PAD.l + 70, PAD.t - 10);
    this.axes = { labels: axes.labels, titles: axes.titles };
  }
}

// One chart sample of a viewer frame: its population and mean energy.
export function sampleOf(frame) {
  const n = frame.entities.length;
  const energy = n ? frame.entities.reduce((sum, e) => sum + e[3], 0) / n : 0;
  return { tick: frame.tick, population: n, energy };
}
