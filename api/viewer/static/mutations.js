// The mutation list (GET /api/mutations, newest first), refreshed every few seconds; each row
// links to its workflow in the Temporal UI and unfolds its validation log (and, for a mutation
// held for approval, its shadow report and a button that opens the decision box), and its
// trait's name opens the trait's versions and verdicts (the Lineage panel).

import { describeError, el, request, timeOf } from "./api.js";
import { shadowTable } from "./governance.js";
import { madeBy } from "./lineage.js";

const REFRESH_MS = 2000;

export function workflowUrl(config, workflowId) {
  return config.workflow_url_template.replace("{workflow_id}", encodeURIComponent(workflowId));
}

// A validation log as a list; the line that failed is highlighted.
export function logList(lines) {
  return el("ol", { class: "log" }, lines.map((line) => el("li", { class: /FAILED|ERROR/.test(line) ? "failed" : null, text: line })));
}

// Where a mutation's code came from: its origin and operators, and the versions it was made from.
function lineageLine(lineage) {
  const from = lineage.parents.length
    ? `from ${lineage.parents.map((p) => `${p.trait_name} v${p.version}`).join(", ")}`
    : "no parent version";
  return `lineage: ${madeBy(lineage)} · ${from}`;
}

export class MutationList {
  // onLineage(traitName): open a trait's family tree; onDecide(mutation): open the decision box.
  constructor({ list, note, statusFilter, mineFilter }, config, agent, onLineage = () => {}, onDecide = () => {}) {
    Object.assign(this, { list, note, statusFilter, mineFilter, config, agent, onLineage, onDecide });
    this.expanded = new Set();
    this.timer = null;
    statusFilter.addEventListener("change", () => this.refresh());
    mineFilter.addEventListener("change", () => this.refresh());
  }

  start() {
    this.refresh();
  }

  async refresh() {
    clearTimeout(this.timer);
    const params = new URLSearchParams({ limit: "50" });
    if (this.statusFilter.value) params.set("status", this.statusFilter.value);
    if (this.mineFilter.checked) {
      if (!this.agent.agentId) {
        this.note.textContent = "“only mine” needs your agent: register or paste a key above";
        this.list.replaceChildren();
        this.timer = setTimeout(() => this.refresh(), REFRESH_MS);
        return;
      }
      params.set("agent_id", this.agent.agentId);
    }
    const answer = await request(`/api/mutations?${params}`);
    if (answer.ok) {
      this.note.textContent = answer.data.mutations.length ? "" : "no mutations yet";
      this.render(answer.data.mutations);
    } else {
      const { title, lines } = describeError(answer);
      this.note.textContent = `the list is unavailable: ${title} ${lines.join("; ")}`;
    }
    this.timer = setTimeout(() => this.refresh(), REFRESH_MS);
  }

  render(mutations) {
    this.list.replaceChildren(...mutations.map((m) => this.row(m)));
  }

  row(m) {
    const open = this.expanded.has(m.mutation_id);
    const toggle = () => {
      if (this.expanded.has(m.mutation_id)) this.expanded.delete(m.mutation_id);
      else this.expanded.add(m.mutation_id);
      this.refresh();
    };
    const version = m.trait_version != null ? ` v${m.trait_version}` : "";
    return el("li", { "data-mutation-id": m.mutation_id },
      el("div", { class: "head", onclick: toggle, title: "show the validation log" },
        el("span", { class: `status ${m.status}`, text: m.status }),
        // The engine stopped running it; its rollback follows (or has happened) with this reason.
        m.quarantine ? el("span", { class: "status quarantined", title: m.quarantine.reason, text: "quarantined" }) : null,
        el("button", { type: "button", class: "link trait-link", title: "versions and verdicts of this trait",
                       onclick: (event) => { event.stopPropagation(); this.onLineage(m.trait_name); } },
          el("strong", { text: `${m.trait_name}${version}` })),
        m.failure_reason_code ? el("span", { class: "failure", text: m.failure_reason_code }) : null,
        m.fitness_verdict ? el("span", { class: `verdict ${m.fitness_verdict}`, title: m.verdict_reason ?? "", text: `fitness ${m.fitness_verdict}` }) : null,
        el("code", { text: m.mutation_id }),
        el("span", { class: "note", text: `${m.agent_id} · ${timeOf(m.created_at)}` }),
        el("a", { class: "workflow", href: workflowUrl(this.config, m.workflow_id), target: "_blank", rel: "noopener",
                  onclick: (event) => event.stopPropagation(), text: "workflow ↗" }),
      ),
      open ? el("div", {},
        m.goal ? el("p", { class: "note", text: `goal: ${m.goal}` }) : null,
        m.quarantine ? el("p", { class: "note", text: `quarantined ${timeOf(m.quarantine.quarantined_at)}: ${m.quarantine.reason}` }) : null,
        m.verdict_reason ? el("p", { class: "note verdict-reason", text: `fitness ${m.fitness_verdict}: ${m.verdict_reason}` }) : null,
        m.rollback_reason ? el("p", { class: "note", text: `rolled back: ${m.rollback_reason}` }) : null,
        m.lineage ? el("p", { class: "note lineage" }, lineageLine(m.lineage), " ",
          m.trait_version != null ? el("button", { type: "button", class: "link", text: "family tree",
            onclick: () => this.onLineage(m.trait_name) }) : null) : null,
        m.shadow_report ? shadowBlock(m.shadow_report) : null,
        m.status === "awaiting_approval" ? el("button", { type: "button", class: "decide", text: "decide…",
          title: "approve or reject it (an operator's key)", onclick: () => this.onDecide(m) }) : null,
        logList(m.validation_log)) : null,
    );
  }
}

// A held mutation's shadow: its trait beside the live ones in a fork of the world, against the fork without it.
function shadowBlock(report) {
  return el("div", { class: "shadow-report" },
    el("p", { class: "note", text: `shadow: ${report.ticks} ticks from tick ${report.from_tick}, without and with ${report.trait.name}` }),
    shadowTable(report),
    el("p", { class: "note report-hash", text: `report ${report.report_hash}` }));
}
