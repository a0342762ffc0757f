// The visitor's agent (register or paste an API key, kept in localStorage) and the proposal
// form, which follows its proposal's status until a verdict and shows every error as the API
// gave it.

import { describeError, el, request, showMessage } from "./api.js";
import { logList } from "./mutations.js";

const KEY_STORAGE = "genesis.apiKey";
const POLL_MS = 700;          // while the proposal is being validated and sandboxed
const OBSERVING_POLL_MS = 3000;  // while it is live and observed (a window of world ticks)
const FOLLOW_FOR_MS = 15 * 60 * 1000;
const SETTLED = new Set(["rejected", "failed", "kept", "rolled_back"]);
const GOOD = new Set(["sandbox_ok", "activated", "kept"]);
const TALLY_EVERY_MS = 15000;  // proposals made elsewhere (CLI, curl) count too

// The prefilled example, with numbers of this visitor's own: the same code twice is DUPLICATE_CODE,
// so one visitor's proposal of it must not take it from every other.
function example() {
  const hungry = (25 + Math.floor(Math.random() * 1000) / 100).toFixed(2);
  const saving = (0.85 + Math.floor(Math.random() * 1000) / 10000).toFixed(4);
  return `class BaseTrait:
    """Base trait protocol stub — no import needed."""
    pass

class EnergySaverTrait(BaseTrait):
    async def execute(self, entity) -> None:
        if entity.energy < ${hungry}:
            entity.energy_consumption_rate *= ${saving}
`;
}

export class Agent {
  constructor(ui, config) {
    Object.assign(this, ui);
    this.config = config;
    this.apiKey = localStorage.getItem(KEY_STORAGE);
    this.agentId = null;
    this.registerForm.addEventListener("submit", (event) => { event.preventDefault(); this.register(); });
    this.keyForm.addEventListener("submit", (event) => { event.preventDefault(); this.useKey(this.keyInput.value.trim()); });
    this.forget.addEventListener("click", () => { localStorage.removeItem(KEY_STORAGE); this.apiKey = null; this.agentId = null; this.render(); });
  }

  async start() {
    if (this.apiKey) await this.useKey(this.apiKey, { quiet: true });
    else this.render();
    setInterval(() => this.refresh(), TALLY_EVERY_MS);
  }

  // Read the agent's record again: its tally changes with every proposal and verdict. A failed
  // read keeps what is shown (useKey reports errors when the visitor acts).
  async refresh() {
    if (!this.apiKey) return;
    const key = this.apiKey;
    const answer = await request("/v1/agents/me", { apiKey: key });
    if (answer.ok && this.apiKey === key) this.render(answer.data);
  }

  async register() {
    const answer = await request("/v1/agents/register", { method: "POST", body: { name: this.registerName.value.trim(), description: "registered in the world viewer" } });
    if (!answer.ok) return showMessage(this.message, { ...describeError(answer), kind: "error" });
    showMessage(this.message, {
      kind: "ok", title: `registered ${answer.data.agent_id}`,
      lines: [`API key (shown once, kept in this browser): ${answer.data.api_key}`],
    });
    await this.useKey(answer.data.api_key, { quiet: true });
  }

  async useKey(key, { quiet = false } = {}) {
    if (!key) return showMessage(this.message, { kind: "error", title: "paste an API key first" });
    const answer = await request("/v1/agents/me", { apiKey: key });
    if (!answer.ok) {
      if (answer.status === 401) { localStorage.removeItem(KEY_STORAGE); this.apiKey = null; this.agentId = null; }
      this.render();
      return showMessage(this.message, { ...describeError(answer), kind: "error" });
    }
    this.apiKey = key;
    this.agentId = answer.data.agent_id;
    localStorage.setItem(KEY_STORAGE, key);
    this.keyInput.value = "";
    this.render(answer.data);
    if (!quiet) showMessage(this.message, { kind: "ok", title: `using the key of ${answer.data.agent_id}` });
  }

  render(me) {
    const known = Boolean(this.agentId);
    this.forget.hidden = !known;
    if (known) {
      const rep = me?.reputation;
      const tally = rep ? ` — proposed ${rep.proposed}, kept ${rep.kept}, rolled back ${rep.rolled_back}` : "";
      this.state.textContent = `Proposing as ${me?.name ?? ""} (${this.agentId}, key ${me?.key_prefix ?? "…"})${tally}`;
    } else if (this.config.auth === "required") {
      this.state.textContent = "Proposals need an API key: register an agent or paste the key of one.";
    } else {
      this.state.textContent = "This API runs with GENESIS_AUTH=open: proposals without a key are sent as agent “world-viewer”.";
    }
  }
}

export class ProposeForm {
  constructor(ui, agent, onProposed) {
    Object.assign(this, ui);
    this.agent = agent;
    this.onProposed = onProposed;
    if (!this.code.value) this.code.value = example();
    this.form.addEventListener("submit", (event) => { event.preventDefault(); this.submit(); });
  }

  body() {
    const body = { trait_name: this.traitName.value.trim(), goal: this.goal.value, code: this.code.value };
    if (this.replaces.checked) body.replaces = { trait_name: body.trait_name };
    if (!this.agent.apiKey && this.agent.config.auth === "open") body.agent_id = "world-viewer";
    return body;
  }

  async submit() {
    if (!this.agent.apiKey && this.agent.config.auth === "required") {
      return showMessage(this.result, { kind: "error", title: "no API key", lines: ["register an agent or paste a key above, then propose"] });
    }
    const answer = await request("/api/mutations/propose", { method: "POST", body: this.body(), apiKey: this.agent.apiKey });
    if (!answer.ok) return showMessage(this.result, { ...describeError(answer), kind: "error" });
    const id = answer.data.mutation_id;
    showMessage(this.result, { title: `${answer.status} ${id}: ${answer.data.status}`, lines: [answer.data.message] });
    this.onProposed(id);
    this.agent.refresh();
    this.follow(id);
  }

  // Poll the proposal's status until a verdict; a rejection shows its code and validation log.
  async follow(id) {
    const until = Date.now() + FOLLOW_FOR_MS;
    let status = "queued";
    this.following = id;  // a newer proposal takes the result box over
    while (Date.now() < until && this.following === id) {
      await new Promise((resolve) => setTimeout(resolve, status === "activated" ? OBSERVING_POLL_MS : POLL_MS));
      const answer = await request(`/api/mutations/${id}/status`);
      if (this.following !== id) return;
      if (!answer.ok) return showMessage(this.result, { ...describeError(answer), kind: "error" });
      const m = answer.data;
      if (m.status !== status) this.agent.refresh();  // the tally counts it by its status
      status = m.status;
      this.result.hidden = false;
      this.result.className = `message ${GOOD.has(m.status) ? "ok" : SETTLED.has(m.status) ? "error" : ""}`;
      this.result.replaceChildren(
        el("strong", { text: `${id}: ${m.status}${m.failure_reason_code ? " — " + m.failure_reason_code : ""}` }),
        logList(m.validation_log),
      );
      if (SETTLED.has(m.status)) return;
    }
  }
}
