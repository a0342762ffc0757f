// The world's rules (GET /v1/manifest) and the proposals to change them
// (GET /v1/governance/proposals), refreshed every few seconds; each proposal opens its diff and
// its shadow report: baseline and candidate side by side. Deciding on a proposal is an
// operator's, by key (the CLI or the REST API): the viewer only shows.

import { describeError, el, request } from "./api.js";

const REFRESH_MS = 5000;
const ROWS = [
  ["population at the end", "population_end"],
  ["mean population", "population_mean"],
  ["lowest population", "population_min"],
  ["energy at the end", "energy_end"],
  ["births", "births"],
];

const sum = (counts) => Object.values(counts).reduce((a, n) => a + n, 0);

// A shadow report's baseline and candidate side by side: a proposal's, or a held mutation's (with
// its trait's carriers, calls and errors, and where the engine would have quarantined it).
export function shadowTable(report) {
  const b = report.baseline, c = report.candidate;
  const row = (label, left, right) => el("tr", {}, el("td", { text: label }), el("td", { text: String(left) }), el("td", { text: String(right) }));
  const rows = [...ROWS.map(([label, key]) => row(label, b[key], c[key])), row("deaths", sum(b.deaths), sum(c.deaths))];
  if (report.trait) {
    const mine = c.traits[report.trait.name] ?? {};
    rows.push(row("its carriers (most)", "", c.carriers.max), row("its calls / errors", "", `${mine.calls ?? 0} / ${mine.errors ?? 0}`));
    if (mine.quarantined_at_tick != null) rows.push(row("quarantined at tick", "", mine.quarantined_at_tick));
  }
  return el("table", { class: "shadow" },
    el("tr", {}, el("th", { text: "" }), el("th", { text: "baseline" }), el("th", { text: "candidate" })), ...rows);
}

export class GovernancePanel {
  constructor({ manifest, list, note }) {
    Object.assign(this, { manifest, list, note });
    this.open = new Set();
    this.timer = null;
  }

  start() {
    this.refresh();
  }

  async refresh() {
    clearTimeout(this.timer);
    const [rules, proposals] = await Promise.all([request("/v1/manifest"), request("/v1/governance/proposals?limit=10")]);
    if (rules.ok) {
      this.manifest.textContent = `rules v${rules.data.version} · ${rules.data.hash.slice(0, 12)}`;
    }
    if (proposals.ok) {
      const items = proposals.data.proposals;
      this.note.textContent = items.length ? "" : "no proposals to change the rules yet";
      this.list.replaceChildren(...items.map((p) => this.row(p)));
    } else {
      const { title, lines } = describeError(proposals);
      this.note.textContent = `the proposals are unavailable: ${title} ${lines.join("; ")}`;
    }
    this.timer = setTimeout(() => this.refresh(), REFRESH_MS);
  }

  row(p) {
    const shown = this.open.has(p.proposal_id);
    const toggle = el("button", {
      type: "button", class: "link", text: shown ? "hide" : "show",
      onclick: () => { shown ? this.open.delete(p.proposal_id) : this.open.add(p.proposal_id); this.refresh(); },
    });
    return el("li", { "data-proposal-id": p.proposal_id },
      el("div", { class: "head" },
        el("strong", { text: p.reason }),
        el("span", { class: `status ${p.status}`, text: p.status.replace("_", " ") }),
        el("span", { class: "note", text: `${p.author_role} ${p.author}` }),
        toggle),
      shown ? this.details(p) : null);
  }

  details(p) {
    const ops = el("ul", { class: "ops" }, ...p.ops.map((op) =>
      el("li", { text: `${op.op} ${op.path}${"value" in op ? ` = ${JSON.stringify(op.value)}` : ""}` })));
    const parts = [ops];
    if (p.report) {
      parts.push(
        el("p", { class: "note", text: `shadow: ${p.report.ticks} ticks from tick ${p.report.from_tick} (${p.report.recorded_ticks} on recorded inputs)` }),
        shadowTable(p.report),
        el("p", { class: "note report-hash", text: `report ${p.report_hash}` }));
    }
    if (p.failure) parts.push(el("p", { class: "note reason", text: p.failure }));
    if (p.applied_version) parts.push(el("p", { class: "note", text: `applied as rules v${p.applied_version}` }));
    return el("div", { class: "details" }, ...parts);
  }
}
