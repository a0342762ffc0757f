// Population and average energy over time, drawn by hand on a canvas (no chart library).
// Population uses the left scale, energy the right one (0..max energy).

const POPULATION = "#6cb6ff";
const ENERGY = "#e5b454";
const MAX_SAMPLES = 300;

export class Chart {
  constructor(canvas, { maxEnergy = 100 } = {}) {
    this.canvas = canvas;
    this.ctx = canvas.getContext("2d");
    this.maxEnergy = maxEnergy;
    this.samples = [];  // {tick, population, energy}
  }

  add(sample) {
    const last = this.samples[this.samples.length - 1];
    if (last && sample.tick <= last.tick) {
      if (sample.tick < last.tick) this.samples = [];  // the engine restarted: start over
      else return;
    }
    this.samples.push(sample);
    if (this.samples.length > MAX_SAMPLES) this.samples.shift();
    this.draw();
  }

  draw() {
    const { ctx, canvas, samples } = this;
    const w = canvas.width, h = canvas.height, pad = { l: 44, r: 44, t: 10, b: 20 };
    ctx.fillStyle = "#0b0d11";
    ctx.fillRect(0, 0, w, h);
    ctx.font = "11px system-ui, sans-serif";
    if (samples.length < 2) {
      ctx.fillStyle = "#8a93a3";
      ctx.fillText("waiting for the world…", pad.l, h / 2);
      return;
    }
    const popMax = Math.max(10, ...samples.map((s) => s.population)) * 1.1;
    const t0 = samples[0].tick, t1 = samples[samples.length - 1].tick;
    const x = (tick) => pad.l + ((tick - t0) / Math.max(1, t1 - t0)) * (w - pad.l - pad.r);
    const yPop = (v) => h - pad.b - (v / popMax) * (h - pad.t - pad.b);
    const yEnergy = (v) => h - pad.b - (v / this.maxEnergy) * (h - pad.t - pad.b);

    ctx.strokeStyle = "#2a303b";
    ctx.lineWidth = 1;
    for (let i = 0; i <= 4; i++) {
      const y = pad.t + (i / 4) * (h - pad.t - pad.b);
      ctx.beginPath(); ctx.moveTo(pad.l, y); ctx.lineTo(w - pad.r, y); ctx.stroke();
    }
    this.line(samples, x, (s) => yPop(s.population), POPULATION);
    this.line(samples, x, (s) => yEnergy(s.energy), ENERGY);

    ctx.fillStyle = POPULATION;
    ctx.fillText(String(Math.round(popMax)), 4, pad.t + 8);
    ctx.fillText(`population ${samples[samples.length - 1].population}`, pad.l + 4, h - 5);
    ctx.fillStyle = ENERGY;
    ctx.fillText(String(this.maxEnergy), w - pad.r + 6, pad.t + 8);
    ctx.fillText(`avg energy ${samples[samples.length - 1].energy.toFixed(1)}`, pad.l + 130, h - 5);
    ctx.fillStyle = "#8a93a3";
    ctx.fillText(`tick ${t0}–${t1}`, w - pad.r - 110, h - 5);
  }

  line(samples, x, y, colour) {
    const { ctx } = this;
    ctx.strokeStyle = colour;
    ctx.lineWidth = 2;
    ctx.beginPath();
    samples.forEach((s, i) => (i ? ctx.lineTo(x(s.tick), y(s)) : ctx.moveTo(x(s.tick), y(s))));
    ctx.stroke();
  }
}

// One chart sample of a viewer frame: its population and mean energy.
export function sampleOf(frame) {
  const n = frame.entities.length;
  const energy = n ? frame.entities.reduce((sum, e) => sum + e[3], 0) / n : 0;
  return { tick: frame.tick, population: n, energy };
}
