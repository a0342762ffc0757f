// The family tree of a trait (GET /api/traits/{name}/lineage): every version of the trait and the
// versions it descends from, ancestors above their descendants, each card with its status
// and fitness verdict; lines run from each parent to its children. A card of another trait opens
// that trait's tree.

import { describeError, el, request, timeOf } from "./api.js";
import { traitColour } from "./world.js";

const SVG = "http://www.w3.org/2000/svg";

// Rows of the tree, oldest first: a version sits one row above its highest child, so an ancestor
// is drawn just above the version made from it. A cycle in the records (there should be none) is
// cut where it closes.
export function rowsOf(nodes, edges) {
  const children = new Map(nodes.map((n) => [n.mutation_id, []]));
  for (const e of edges) if (children.has(e.child) && children.has(e.parent)) children.get(e.parent).push(e.child);
  const height = new Map();
  const visiting = new Set();
  const heightOf = (id) => {
    if (height.has(id)) return height.get(id);
    if (visiting.has(id)) return -1;
    visiting.add(id);
    const h = Math.max(-1, ...children.get(id).map(heightOf)) + 1;
    visiting.delete(id);
    height.set(id, h);
    return h;
  };
  const rows = [];
  for (const n of nodes) (rows[heightOf(n.mutation_id)] ??= []).push(n);
  const order = (a, b) => a.trait_name.localeCompare(b.trait_name) || a.version - b.version;
  return rows.filter(Boolean).reverse().map((r) => r.sort(order));
}

function verdictOf(n) {
  if (n.fitness_verdict) return { text: `fitness ${n.fitness_verdict}`, kind: n.fitness_verdict };
  if (n.mutation_status === "activated") return { text: "observing", kind: "pending" };
  return { text: "no verdict", kind: "none" };
}

// How a version was made ({origin, operators, seed_trait}: a tree node or a mutation's lineage).
export function madeBy(n) {
  if (!n.origin) return "origin not recorded";
  const steps = n.operators.length ? ` · ${n.operators.join(" → ")}` : "";
  const seed = n.seed_trait ? ` (seed trait ${n.seed_trait})` : "";
  return `${n.origin}${steps}${seed}`;
}

export class LineagePanel {
  constructor({ title, form, input, note, tree }) {
    Object.assign(this, { title, form, input, note, tree });
    this.data = null;  // the last answer shown
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      if (this.input.value.trim()) this.open(this.input.value.trim());
    });
    new ResizeObserver(() => this.drawEdges()).observe(tree);
  }

  async open(traitName) {
    this.input.value = traitName;
    this.title.textContent = traitName;
    this.note.textContent = "loading…";
    const answer = await request(`/api/traits/${encodeURIComponent(traitName)}/lineage`);
    if (!answer.ok) {
      const { title, lines } = describeError(answer);
      this.data = null;
      this.tree.replaceChildren();
      this.note.textContent = `${title}: ${lines.join("; ")}`;
      return;
    }
    this.data = answer.data;
    const { nodes, depth, truncated } = answer.data;
    const ancestors = nodes.filter((n) => n.generation > 0).length;
    this.note.textContent = `${nodes.length - ancestors} version(s), ${ancestors} ancestor version(s) ` +
      `over ${depth} generation(s)${truncated ? " — cut at the bounds, older ancestors left out" : ""}`;
    this.render(answer.data);
    this.tree.scrollIntoView({ block: "nearest" });
  }

  render({ trait_name: traitName, nodes, edges }) {
    const svg = document.createElementNS(SVG, "svg");
    svg.classList.add("lineage-edges");
    const rows = rowsOf(nodes, edges).map((row) =>
      el("div", { class: "lineage-row" }, row.map((n) => this.card(n, traitName))));
    this.tree.replaceChildren(svg, ...rows);
    this.drawEdges();
  }

  card(n, traitName) {
    const verdict = verdictOf(n);
    const other = n.trait_name !== traitName;
    const details = [`mutation ${n.mutation_id}`, `by ${n.agent_id ?? "unknown agent"}`, `live since ${timeOf(n.created_at)}`];
    if (n.seed != null) details.push(`seed ${n.seed}`);
    return el("div", {
      class: `lineage-node${other ? " ancestor" : ""}`,
      "data-mutation-id": n.mutation_id,
      "data-trait-name": n.trait_name,
      title: details.join("\n") + (other ? "\nclick: this trait's family tree" : ""),
      onclick: other ? () => this.open(n.trait_name) : null,
    },
      el("div", {}, el("i", { style: `background: ${traitColour(n.trait_name)}` }), el("strong", { text: `${n.trait_name} v${n.version}` })),
      el("div", {},
        el("span", { class: `status ${n.status}`, text: n.status }),
        el("span", { class: `verdict ${verdict.kind}`, text: verdict.text })),
      el("div", { class: "note", text: madeBy(n) }),
    );
  }

  // Lines from the bottom of each parent's card to the top of each child's (card offsets are
  // relative to the tree, the positioned parent of every card).
  drawEdges() {
    const svg = this.tree.querySelector("svg.lineage-edges");
    if (!svg || !this.data) return;
    svg.setAttribute("width", this.tree.scrollWidth);
    svg.setAttribute("height", this.tree.scrollHeight);
    const cards = new Map([...this.tree.querySelectorAll(".lineage-node")].map((c) => [c.dataset.mutationId, c]));
    const paths = [];
    for (const { parent, child } of this.data.edges) {
      const from = cards.get(parent);
      const to = cards.get(child);
      if (!from || !to) continue;
      const x1 = from.offsetLeft + from.offsetWidth / 2, y1 = from.offsetTop + from.offsetHeight;
      const x2 = to.offsetLeft + to.offsetWidth / 2, y2 = to.offsetTop;
      const bend = Math.max(12, (y2 - y1) / 2);
      const path = document.createElementNS(SVG, "path");
      path.setAttribute("d", `M${x1},${y1} C${x1},${y1 + bend} ${x2},${y2 - bend} ${x2},${y2}`);
      path.dataset.parent = parent;
      path.dataset.child = child;
      paths.push(path);
    }
    svg.replaceChildren(...paths);
  }
}
