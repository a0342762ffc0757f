// The Molbot inspector: opened by a click on a Molbot in the world canvas. Energy and position
// follow the frames; age, generation and the full trait list come from
// GET /api/world/entities/{id} (what the engine publishes about once a second); each trait's live
// version, code, verdict and observed effects from GET /api/traits/{name} and
// GET /api/mutations/{id}/effects.

import { describeError, el, request } from "./api.js";
import { traitColour } from "./world.js";

const ENTITY_EVERY_MS = 1000;
const TRAIT_FRESH_MS = 5000;  // verdicts change while a version is observed
const FACTS_EVERY_MS = 250;

// The observed effects of a mutation, in words (keys not listed here are shown as they are).
const EFFECT_LABELS = {
  fitness_delta: "fitness delta",
  entity_count_delta: "population change",
  avg_energy_delta: "average energy change",
  death_starvation_delta: "starvation deaths change",
  carriers_before: "carriers before",
  carriers_after: "carriers after",
  carrier_avg_energy: "carriers' average energy",
  non_carrier_avg_energy: "others' average energy",
  carrier_births: "births by carriers",
  carrier_deaths: "deaths of carriers",
  window_ticks: "window (ticks)",
};
const SIGNED = new Set(["fitness_delta", "entity_count_delta", "avg_energy_delta", "death_starvation_delta"]);

// Effects in the order of EFFECT_LABELS, then any others.
function orderedEffects(effects) {
  const known = Object.keys(EFFECT_LABELS).filter((key) => key in effects);
  return [...known, ...Object.keys(effects).filter((key) => !(key in EFFECT_LABELS))].map((key) => [key, effects[key]]);
}

function effectValue(key, value) {
  if (typeof value !== "number") return value == null ? "—" : String(value);
  const text = String(Number(value.toFixed(4)));
  return SIGNED.has(key) && value > 0 ? `+${text}` : text;
}

// A trait as the inspector shows it: its current version (the live one, else the newest), the
// live code, and the effects and verdict of the mutation that made that version.
async function loadTrait(name) {
  const detail = await request(`/api/traits/${encodeURIComponent(name)}`);
  if (!detail.ok) return { name, error: describeError(detail), at: Date.now() };
  const version = detail.data.live ?? detail.data.versions[0] ?? null;
  let effects = null;
  if (version) {
    const answer = await request(`/api/mutations/${encodeURIComponent(version.mutation_id)}/effects`);
    if (answer.ok) effects = answer.data;
  }
  return { name, live: detail.data.live, version, effects, at: Date.now() };
}

function verdictOf(info) {
  const verdict = info.effects?.fitness_verdict;
  if (verdict) return { text: `fitness ${verdict}`, kind: verdict };
  if (info.version?.mutation_status === "activated") return { text: "observing", kind: "pending" };
  return { text: "no verdict", kind: "none" };
}

export class Inspector {
  // onTrait(traitName): open a trait's versions and verdicts (the Lineage panel).
  constructor({ panel, title, note, facts, traits, close }, world, onTrait) {
    Object.assign(this, { panel, title, note, facts, traits, world, onTrait });
    this.id = null;
    this.timer = null;
    this.traitInfo = new Map();   // name → loaded trait
    this.openCode = new Set();    // traits whose code is unfolded
    this.shownTraits = "";
    this.lastFacts = 0;
    close.addEventListener("click", () => this.close());
    world.onSelect((id) => this.open(id));
    world.onFrame((frame) => this.follow(frame));
  }

  open(id) {
    clearTimeout(this.timer);
    Object.assign(this, { id, entity: null, entityTick: null, live: null, missingSince: null, diedBy: null, shownTraits: "" });
    this.panel.hidden = false;
    this.title.textContent = `#${id}`;
    this.note.textContent = "loading…";
    this.traits.replaceChildren();
    const row = this.world.frame?.entities.find((e) => e[0] === id);
    if (row) this.live = { tick: this.world.frame.tick, x: row[1], y: row[2], energy: row[3] };
    this.renderFacts();
    this.refresh();
    this.panel.scrollIntoView({ block: "nearest" });
  }

  close() {
    clearTimeout(this.timer);
    this.id = null;
    this.world.clearSelection();
    this.panel.hidden = true;
  }

  // Each frame: the Molbot's position and energy. A frame without it makes it missing; the
  // engine's published entities confirm the death (refresh).
  follow(frame) {
    if (this.id == null || this.diedBy != null) return;
    const row = frame.entities.find((e) => e[0] === this.id);
    if (row) Object.assign(this, { live: { tick: frame.tick, x: row[1], y: row[2], energy: row[3] }, missingSince: null });
    else this.missingSince ??= frame.tick;
    if (performance.now() - this.lastFacts >= FACTS_EVERY_MS) this.renderFacts();
  }

  async refresh() {
    const id = this.id;
    if (id == null) return;
    const answer = await request(`/api/world/entities/${id}`);
    if (this.id !== id) return;  // another Molbot was chosen meanwhile
    if (answer.ok) {
      this.entity = answer.data.entity;
      this.entityTick = answer.data.tick;
      this.note.textContent = "";
      await this.showTraits(this.entity.traits);
    } else if (answer.status === 404 && this.missingSince != null) {
      this.diedBy = this.missingSince;
      this.note.textContent = "";
    } else {
      const { title, lines } = describeError(answer);
      this.note.textContent = `${title}: ${lines.join("; ")}`;
    }
    this.renderFacts();
    if (this.id === id && this.diedBy == null) this.timer = setTimeout(() => this.refresh(), ENTITY_EVERY_MS);
  }

  renderFacts() {
    this.lastFacts = performance.now();
    const e = this.entity, live = this.live;
    const energy = live?.energy ?? e?.energy;
    const facts = [
      ["energy", energy == null ? "…" : `${energy.toFixed(1)}${e ? ` / ${e.max_energy}` : ""}`],
      ["age", e ? `${e.age} ticks (at tick ${this.entityTick})` : "…"],
      ["generation", e ? String(e.generation) : "…"],
      ["position", live ? `${live.x.toFixed(0)}, ${live.y.toFixed(0)}` : "…"],
      ["state", this.diedBy != null ? `died (gone by tick ${this.diedBy})` : live ? `alive at tick ${live.tick}` : "…"],
    ];
    this.facts.replaceChildren(...facts.flatMap(([name, value]) => [el("dt", { text: name }), el("dd", { "data-fact": name, text: value })]));
  }

  async showTraits(names) {
    const stale = names.filter((n) => !this.traitInfo.has(n) || Date.now() - this.traitInfo.get(n).at > TRAIT_FRESH_MS);
    const loaded = await Promise.all(stale.map(loadTrait));
    for (const info of loaded) this.traitInfo.set(info.name, info);
    const infos = names.map((n) => this.traitInfo.get(n));
    const key = JSON.stringify(infos.map(({ at, ...rest }) => rest));
    if (key === this.shownTraits) return;  // unchanged: keep the DOM (and any selection in it)
    this.shownTraits = key;
    this.traits.replaceChildren(
      ...(names.length ? infos.map((info) => this.traitRow(info)) : [el("li", { class: "note", text: "carries no trait" })]),
    );
  }

  traitRow(info) {
    const head = el("div", { class: "head" },
      el("i", { style: `background:${traitColour(info.name)}` }),
      el("button", { type: "button", class: "link trait-open", title: "versions and verdicts of this trait", text: info.name, onclick: () => this.onTrait(info.name) }));
    if (info.error) {
      return el("li", { "data-trait-name": info.name }, head, el("p", { class: "note", text: `${info.error.title}: ${info.error.lines.join("; ")}` }));
    }
    const v = info.version;
    const verdict = verdictOf(info);
    const quarantine = v?.quarantine;
    head.append(...[
      el("span", { text: v ? `v${v.version}` : "" }),
      v ? el("span", { class: `status ${v.status}`, text: v.status }) : null,
      quarantine && v.status !== "quarantined" ? el("span", { class: "status quarantined", text: "quarantined" }) : null,
      el("span", { class: `verdict ${verdict.kind}`, "data-verdict": verdict.kind, text: verdict.text }),
    ].filter(Boolean));
    const made = v ? `mutation ${v.mutation_id} by ${v.agent_id ?? "unknown agent"} · ${v.mutation_status ?? "status unknown"}` : "no version recorded";
    const effects = info.effects;
    return el("li", { "data-trait-name": info.name },
      head,
      el("p", { class: "note", text: made }),
      quarantine ? el("p", { class: "note", text: `quarantined: ${quarantine.reason}` }) : null,
      v?.rollback_reason ? el("p", { class: "note", text: `rolled back: ${v.rollback_reason}` }) : null,
      effects?.observed && effects.effects
        ? el("dl", { class: "effects" }, orderedEffects(effects.effects).flatMap(([key, value]) =>
          [el("dt", { text: EFFECT_LABELS[key] ?? key }), el("dd", { "data-effect": key, text: effectValue(key, value) })]))
        : el("p", { class: "note", text: effects ? `effects: not observed yet (a window of ${effects.observation_window_ticks} ticks)` : "effects: unavailable" }),
      info.live
        ? el("details", {
          class: "code", open: this.openCode.has(info.name),
          ontoggle: (event) => { if (event.target.open) this.openCode.add(info.name); else this.openCode.delete(info.name); },
        }, el("summary", { text: `code of v${info.live.version} (${info.live.class_name})` }), el("pre", {}, el("code", { text: info.live.code })))
        : el("p", { class: "note", text: "no live version: the engine runs no code of it" }),
    );
  }
}
