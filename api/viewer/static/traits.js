// The live traits (GET /api/traits) with their verdicts, then the ones the engine quarantined,
// refreshed every few seconds; each live one opens its family tree.

import { describeError, el, request } from "./api.js";
import { traitColour } from "./world.js";

const REFRESH_MS = 5000;

export class TraitList {
  constructor({ list, note }, onLineage) {
    Object.assign(this, { list, note, onLineage });
    this.timer = null;
  }

  start() {
    this.refresh();
  }

  async refresh() {
    clearTimeout(this.timer);
    const answer = await request("/api/traits");
    if (answer.ok) {
      const { traits, quarantined = [], departed = [], max_live_traits: bound } = answer.data;
      const of = bound != null ? ` of at most ${bound}` : "";
      this.note.textContent = traits.length ? `${traits.length}${of} live` : "no live traits yet";
      this.list.replaceChildren(
        ...traits.map((t) => this.row(t)),
        ...quarantined.map((q) => this.quarantinedRow(q)),
        ...departed.map((d) => this.departedRow(d)),
      );
    } else {
      const { title, lines } = describeError(answer);
      this.note.textContent = `the traits are unavailable: ${title} ${lines.join("; ")}`;
    }
    this.timer = setTimeout(() => this.refresh(), REFRESH_MS);
  }

  row(t) {
    const carriers = t.carriers != null ? ` · ${t.carriers} ${t.carriers === 1 ? "carrier" : "carriers"}` : "";
    return el("li", { "data-trait-name": t.trait_name },
      el("i", { style: `background: ${traitColour(t.trait_name)}` }),
      el("strong", { text: `${t.trait_name} v${t.version}` }),
      verdictBadge(t),
      t.running === false ? el("span", { class: "status loading", title: "the engine loads it within a second or two", text: "not running yet" }) : null,
      el("span", { class: "note", text: `${t.agent_id ?? "unknown agent"}${carriers}` }),
      el("button", { type: "button", class: "link lineage-open", onclick: () => this.onLineage(t.trait_name), text: "Lineage" }),
    );
  }

  // A kept trait selection took out since its verdict: extinct (its owner may revive it), or
  // rolled back by a late verdict of the live ledger.
  departedRow(d) {
    const label = d.how === "extinct" ? "extinct" : "rolled back late";
    const now = d.live_version != null ? ` · v${d.live_version} is live` : "";
    return el("li", { "data-trait-name": d.trait_name, "data-departed": d.how, class: "departed" },
      el("i", { style: `background: ${traitColour(d.trait_name)}` }),
      el("strong", { text: `${d.trait_name} v${d.version}` }),
      el("span", { class: `status ${d.how}`, title: d.reason ?? "", text: label }),
      el("span", { class: "note", text: `${d.agent_id ?? "unknown agent"}${now}` }),
      el("p", { class: "note reason", text: d.reason ?? "" }),
    );
  }

  // A trait whose newest version the engine quarantined: not live, with the engine's reason.
  quarantinedRow(q) {
    const after = q.mutation_status === "rolled_back" ? "rolled back" : "rollback follows";
    const restored = q.live_version != null ? ` · v${q.live_version} is live` : "";
    return el("li", { "data-trait-name": q.trait_name, "data-quarantined": "true", class: "quarantined" },
      el("i", { style: `background: ${traitColour(q.trait_name)}` }),
      el("strong", { text: `${q.trait_name} v${q.version}` }),
      el("span", { class: "status quarantined", title: q.quarantine.reason, text: "quarantined" }),
      el("span", { class: "note", text: `${q.agent_id ?? "unknown agent"} · ${after}${restored}` }),
      el("p", { class: "note reason", text: q.quarantine.reason }),
    );
  }
}

// How the trait's mutation was judged: observing, or kept with its fitness verdict (the reason
// on hover; inconclusive: too few carriers to judge it).
function verdictBadge(t) {
  if (t.mutation_status === "activated") return el("span", { class: "status activated", text: "observing" });
  if (!t.fitness_verdict) return null;
  return el("span", { class: `verdict ${t.fitness_verdict}`, title: t.verdict_reason ?? "", text: t.fitness_verdict });
}
