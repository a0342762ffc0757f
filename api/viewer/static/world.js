// The world canvas: frames from /ws/world ({"tick", "traits": [name], "entities": [[id, x, y,
// energy, newest trait|null, [trait index]]], "resources": [[x, y]]}) drawn once per animation
// frame, each Molbot coloured by its newest trait, or, once a legend entry is chosen, the carriers
// of that trait in its colour and the rest grey. The legend lists the most carried traits. A
// click on a Molbot selects it (ringed on the canvas) for the inspector.

import { el, reconnectingSocket } from "./api.js";

const NO_TRAIT = "#8a93a3";
const RESOURCE = "#3fae5a";
const SELECTED = "#ffffff";
const HIT_RADIUS = 9;  // canvas pixels around a Molbot's centre that select it

// A stable colour per trait name (hash → hue), so a trait keeps its colour across reloads.
export function traitColour(name) {
  if (!name) return NO_TRAIT;
  let h = 0;
  for (const ch of name) h = (h * 31 + ch.codePointAt(0)) >>> 0;
  return `hsl(${h % 360}, 75%, 60%)`;
}

export class WorldView {
  constructor(canvas, legend, { width, height, maxEnergy = 100 }) {
    this.canvas = canvas;
    this.ctx = canvas.getContext("2d");
    this.legend = legend;
    this.world = { width, height };
    this.maxEnergy = maxEnergy;
    this.frame = null;
    this.framesReceived = 0;
    this.framesDrawn = 0;
    this.dirty = false;
    this.listeners = [];
    this.selected = null;  // the id of the Molbot ringed on the canvas
    this.shown = null;  // a trait whose carriers are coloured (the legend's choice), or null: newest traits
    this.selectListeners = [];
    canvas.addEventListener("click", (event) => {
      const id = this.entityAt(event.clientX, event.clientY);
      if (id != null) this.select(id);
    });
    canvas.addEventListener("mousemove", (event) => {
      canvas.style.cursor = this.entityAt(event.clientX, event.clientY) != null ? "pointer" : "";
    });
  }

  onSelect(listener) { this.selectListeners.push(listener); }

  select(id) {
    this.selected = id;
    this.dirty = true;
    for (const listener of this.selectListeners) listener(id);
  }

  clearSelection() {
    this.selected = null;
    this.dirty = true;
  }

  // The id of the Molbot under a point of the page (client coordinates), or null. The canvas
  // draws on its own pixels (canvas.width × canvas.height) and the page shows them at the size of
  // its box: mapping through that box undoes CSS scaling, page zoom and devicePixelRatio alike.
  entityAt(clientX, clientY) {
    if (!this.frame) return null;
    const box = this.canvas.getBoundingClientRect();
    if (!box.width || !box.height) return null;
    const px = (clientX - box.left) * (this.canvas.width / box.width);
    const py = (clientY - box.top) * (this.canvas.height / box.height);
    const sx = this.canvas.width / this.world.width, sy = this.canvas.height / this.world.height;
    let best = null, bestDistance = HIT_RADIUS * HIT_RADIUS;
    for (const [id, x, y] of this.frame.entities) {
      const d = (x * sx - px) ** 2 + (y * sy - py) ** 2;
      if (d <= bestDistance) { best = id; bestDistance = d; }
    }
    return best;
  }

  setWorldSize(width, height, maxEnergy) {
    this.world = { width, height };
    if (maxEnergy) this.maxEnergy = maxEnergy;
    this.dirty = true;
  }

  onFrame(listener) { this.listeners.push(listener); }

  connect(onState) {
    reconnectingSocket("/ws/world", {
      onState,
      onMessage: (text) => {
        this.frame = JSON.parse(text);
        this.framesReceived += 1;
        this.dirty = true;
        for (const listener of this.listeners) listener(this.frame);
      },
    });
    this.draw();
    const loop = () => {
      if (this.dirty) { this.draw(); this.dirty = false; }
      requestAnimationFrame(loop);
    };
    requestAnimationFrame(loop);
  }

  draw() {
    const { ctx, canvas, frame } = this;
    const sx = canvas.width / this.world.width;
    const sy = canvas.height / this.world.height;
    ctx.fillStyle = "#0b0d11";
    ctx.fillRect(0, 0, canvas.width, canvas.height);
    if (!frame) {
      ctx.fillStyle = NO_TRAIT;
      ctx.font = "16px system-ui, sans-serif";
      ctx.fillText("waiting for the world's frames (is the engine running? `python -m engine`)", 20, 30);
      return;
    }
    ctx.fillStyle = RESOURCE;
    for (const [x, y] of frame.resources) ctx.fillRect(x * sx - 2, y * sy - 2, 4, 4);
    const names = frame.traits ?? [];
    const shown = this.shown == null ? -1 : names.indexOf(this.shown);
    const carriers = new Array(names.length).fill(0);
    let bare = 0;
    for (const [, x, y, energy, trait, carried = []] of frame.entities) {
      for (const i of carried) carriers[i] += 1;
      if (!carried.length) bare += 1;
      const lit = this.shown == null || carried.includes(shown);
      ctx.globalAlpha = (lit ? 0.35 + 0.65 * Math.max(0, Math.min(1, energy / this.maxEnergy)) : 0.25);
      ctx.fillStyle = this.shown == null ? traitColour(trait) : (lit ? traitColour(this.shown) : NO_TRAIT);
      ctx.beginPath();
      ctx.arc(x * sx, y * sy, 3.5, 0, 2 * Math.PI);
      ctx.fill();
    }
    ctx.globalAlpha = 1;
    const chosen = this.selected == null ? null : frame.entities.find((e) => e[0] === this.selected);
    if (chosen) {
      ctx.strokeStyle = SELECTED;
      ctx.lineWidth = 2;
      ctx.beginPath();
      ctx.arc(chosen[1] * sx, chosen[2] * sy, 8, 0, 2 * Math.PI);
      ctx.stroke();
    }
    this.framesDrawn += 1;
    if (this.framesDrawn % 15 === 1) this.drawLegend(names.map((name, i) => [name, carriers[i]]), bare);
  }

  // Show the carriers of ``trait`` (null: every Molbot in its newest trait's colour).
  show(trait) {
    this.shown = this.shown === trait ? null : trait;
    this.dirty = true;
    this.framesDrawn = 0;  // the legend follows at once
  }

  drawLegend(counts, bare) {
    const items = counts.filter(([, n]) => n > 0).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0])).slice(0, 10);
    if (this.shown != null && !items.some(([name]) => name === this.shown)) items.push([this.shown, 0]);
    const dominant = items[0]?.[0];  // the most carried trait on screen
    const entry = ([trait, n]) => el("li", { class: trait === dominant ? "dominant" : null, "data-trait": trait },
      el("button", {
        type: "button", class: "legend-trait", "aria-pressed": String(trait === this.shown),
        title: trait === this.shown ? "colour every Molbot by its newest trait again" : `colour the carriers of ${trait}`,
        onclick: () => this.show(trait),
      },
      el("i", { style: `background:${traitColour(trait)}` }),
      `${trait} ${n} ${n === 1 ? "carrier" : "carriers"}${trait === dominant ? " (most carried)" : ""}${trait === this.shown ? " — shown" : ""}`));
    this.legend.replaceChildren(
      ...items.map(entry),
      el("li", {}, el("i", { style: `background:${NO_TRAIT}` }), `no trait ${bare}`),
      el("li", {}, el("i", { style: `background:${RESOURCE};border-radius:0` }), `resources ${this.frame.resources.length}`),
    );
  }
}
