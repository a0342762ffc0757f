// The world viewer: wires the panels of index.html to the API. window.genesisViewer exposes the
// live state (frames received, chart samples, history, the inspected Molbot) for a look from the
// browser console and the tests.

import { request } from "./api.js";
import { Agent, ProposeForm } from "./agent.js";
import { Chart, sampleOf } from "./chart.js";
import { Feed } from "./feed.js";
import { WorldHistory } from "./history.js";
import { Inspector } from "./inspector.js";
import { ApprovalBox } from "./approval.js";
import { GovernancePanel } from "./governance.js";
import { LineagePanel } from "./lineage.js";
import { MutationList } from "./mutations.js";
import { TraitChart } from "./trait_chart.js";
import { TraitList } from "./traits.js";
import { WorldView } from "./world.js";

const $ = (id) => document.getElementById(id);
const CHART_EVERY_MS = 500;
const STATS_EVERY_MS = 2000;

async function main() {
  const config = (await request("/api/viewer/config")).data;
  $("temporal-ui").href = `${config.temporal_ui_url}/namespaces/${encodeURIComponent(config.temporal_namespace)}/workflows`;

  const world = new WorldView($("world"), $("legend"), { width: config.world_width, height: config.world_height });
  const chart = new Chart($("chart"));
  chart.draw();
  const history = new WorldHistory($("history-note"));
  history.onChange((points) => chart.setHistory(points));
  let lastSample = 0;
  world.onFrame((frame) => {
    $("tick").textContent = `tick ${frame.tick}`;
    if (performance.now() - lastSample >= CHART_EVERY_MS) {
      lastSample = performance.now();
      chart.add(sampleOf(frame));
    }
  });
  world.connect((state) => {
    const pill = $("world-link");
    pill.dataset.state = state;
    pill.textContent = state === "live" ? "world: live" : "world: reconnecting…";
  });
  followEngine(world, chart);

  const agent = new Agent({
    state: $("agent-state"), registerForm: $("register-form"), registerName: $("register-name"),
    keyForm: $("key-form"), keyInput: $("key-input"), forget: $("forget-key"), message: $("agent-message"),
  }, config);
  const lineage = new LineagePanel({
    title: $("lineage-title"), form: $("lineage-form"), input: $("lineage-name"), note: $("lineage-note"), tree: $("lineage-tree"),
  });
  const openLineage = (name) => lineage.open(name);
  const traitChart = new TraitChart($("trait-chart"), $("trait-chart-legend"), openLineage);
  traitChart.draw();
  history.onChange((points) => traitChart.setHistory(points));
  const inspector = new Inspector({
    panel: $("inspector"), title: $("inspector-title"), note: $("inspector-note"), facts: $("inspector-facts"),
    traits: $("inspector-traits"), close: $("inspector-close"),
  }, world, openLineage);
  const approval = new ApprovalBox({
    box: $("approval"), title: $("approval-title"), key: $("approval-key"), reason: $("approval-reason"),
    approve: $("approval-approve"), reject: $("approval-reject"), close: $("approval-close"), message: $("approval-message"),
  }, () => mutations.refresh());
  const mutations = new MutationList({
    list: $("mutations"), note: $("mutations-note"), statusFilter: $("status-filter"), mineFilter: $("mine-filter"),
  }, config, agent, openLineage, (m) => approval.open(m));
  new ProposeForm({
    form: $("propose-form"), traitName: $("trait-name"), goal: $("goal"), replaces: $("replaces"),
    code: $("code"), result: $("propose-result"),
  }, agent, () => mutations.refresh());
  const feed = new Feed({ list: $("feed"), note: $("feed-note") }, config);
  const traits = new TraitList({ list: $("traits"), note: $("traits-note") }, openLineage);

  const governance = new GovernancePanel({ manifest: $("manifest-version"), list: $("proposals"), note: $("proposals-note") });
  window.genesisViewer = {
    config, world, chart, history, traitChart, inspector, agent, mutations, approval, feed, traits, lineage, governance,
  };
  history.start();
  await agent.start();
  mutations.start();
  feed.start();
  traits.start();
  governance.start();
}

// The live traits (the set GET /api/traits lists) and, when they differ for now, how many the
// engine is running (a new trait is loaded within a second or two).
function traitCounts(s) {
  if (s.live_traits == null) return `live traits ? · running ${s.active_traits.length}`;
  const live = [...s.live_traits].sort().join(), running = [...s.active_traits].sort().join();
  return `live traits ${s.live_traits.length}` + (live === running ? "" : ` (running ${s.active_traits.length})`);
}

// The engine's world size (GET /api/world/state, until it answers) and headline numbers
// (GET /api/stats, repeatedly).
let sized = false;
async function followEngine(world, chart) {
  if (!sized) {
    const state = await request("/api/world/state");
    if (state.ok && state.data.params) {
      const { width, height, max_energy: maxEnergy } = state.data.params;
      world.setWorldSize(width, height, maxEnergy);
      if (maxEnergy) chart.maxEnergy = maxEnergy;
      sized = true;
    }
  }
  const stats = await request("/api/stats");
  const line = $("stats");
  if (stats.ok) {
    const s = stats.data;
    line.textContent = `population ${s.population} · avg energy ${s.avg_energy?.toFixed(1)} · ` +
      `${s.ticks_per_second?.toFixed(0)} ticks/s · ${traitCounts(s)} · mutations applied ${s.mutations_applied ?? "?"}`;
  } else {
    line.textContent = `engine: ${stats.data?.detail ?? stats.status}`;
  }
  setTimeout(() => followEngine(world, chart), STATS_EVERY_MS);
}

main();
