// The decision box of a mutation held for approval: an operator's key (kept in this page only,
// never stored), a reason, and approve or reject (POST /api/mutations/{id}/approval). An approval
// names the shadow report shown, so it is refused if the report is not the one read.

import { describeError, request, showMessage } from "./api.js";

export class ApprovalBox {
  constructor({ box, title, key, reason, approve, reject, close, message }, onDecided = () => {}) {
    Object.assign(this, { box, title, key, reason, message, onDecided });
    this.mutation = null;
    approve.addEventListener("click", () => this.decide("approve"));
    reject.addEventListener("click", () => this.decide("reject"));
    close.addEventListener("click", () => { this.box.hidden = true; this.mutation = null; });
  }

  open(mutation) {
    this.mutation = mutation;
    this.title.textContent = `${mutation.trait_name} · ${mutation.mutation_id} (${mutation.agent_id})`;
    this.message.hidden = true;
    this.box.hidden = false;
    (this.key.value ? this.reason : this.key).focus();
  }

  async decide(decision) {
    const m = this.mutation;
    if (!m) return;
    if (!this.key.value.trim()) {
      showMessage(this.message, { title: "an operator key is needed", lines: ["paste an X-Operator-Key (genop_…)"], kind: "error" });
      return;
    }
    const body = { decision, reason: this.reason.value.trim() };
    if (decision === "approve" && m.shadow_report?.report_hash) body.report_hash = m.shadow_report.report_hash;
    const answer = await request(`/api/mutations/${encodeURIComponent(m.mutation_id)}/approval`,
      { method: "POST", body, operatorKey: this.key.value.trim() });
    if (answer.ok) {
      showMessage(this.message, { title: `${decision} sent`, lines: [`${m.mutation_id} moves on from ${answer.data.status}`], kind: "ok" });
      this.onDecided();
    } else {
      showMessage(this.message, { ...describeError(answer), kind: "error" });
    }
  }
}
