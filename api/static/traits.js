// The live traits (GET /api/traits), refreshed every few seconds; each opens its family tree.

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
      const traits = answer.data.traits;
      this.note.textContent = traits.length ? "" : "no live traits yet";
      this.list.replaceChildren(...traits.map((t) => this.row(t)));
    } else {
      const { title, lines } = describeError(answer);
      this.note.textContent = `the traits are unavailable: ${title} ${lines.join("; ")}`;
    }
    this.timer = setTimeout(() => this.refresh(), REFRESH_MS);
  }

  row(t) {
    const carriers = t.carriers != null ? ` · ${t.carriers} carriers` : "";
    return el("li", { "data-trait-name": t.trait_name },
      el("i", { style: `background: ${traitColour(t.trait_name)}` }),
      el("strong", { text: `${t.trait_name} v${t.version}` }),
      el("span", { class: "note", text: `${t.agent_id ?? "unknown agent"}${carriers}` }),
      el("button", { type: "button", class: "link lineage-open", onclick: () => this.onLineage(t.trait_name), text: "Lineage" }),
    );
  }
}
