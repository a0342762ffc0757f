"""The world's settings groups: its engine, its journal, its rounds, and how traits in it are
observed and judged (``settings.engine``, ``settings.journal``, ``settings.round``,
``settings.observation``, ``settings.verdict``). ``genesis.config`` puts them in the one
Settings model; their descriptions are ``docs/configuration.md``'s."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from genesis.verdicts import ExperimentSettings, LedgerRule


class EngineSettings(BaseModel):
    """The world engine (`python -m engine`) and its live trait host."""

    tick_rate: float = Field(
        default=60.0,
        gt=0,
        description="World ticks per second; a tick's budget is its inverse (paced runs; see `fast_forward`).",
    )
    fast_forward: bool = Field(
        default=False,
        description="Run the world as fast as the machine allows, for benchmarks and shadow runs: no sleeping "
        "between ticks and no tick budget (no overruns); the trait host gets `fast_forward_trait_deadline_ms` per "
        "tick and the ticks wait for it to be restarted instead of running without traits. Every tick's state hash "
        "equals a paced run's given the same seed and the same inputs at the same ticks (docs/world.md). Viewer "
        "frames keep the paced rate in wall time; status and registry refreshes stay about once a second.",
    )
    fast_forward_trait_deadline_ms: float = Field(
        default=5000.0,
        gt=0,
        description="In fast-forward, the wall clock the live trait host has for one tick before it is replaced: "
        "generous, so a busy machine never costs a tick its intents (the traits' CPU limits still apply).",
    )
    seed: int = Field(default=42, description="Seed of the live world.")
    snapshot_interval: int = Field(default=300, ge=1, description="Ticks between two WorldSnapshots.")
    postgres_every: int = Field(
        default=30, ge=1, description="Every Nth WorldSnapshot is also written to the Postgres table `world_snapshots`."
    )
    frame_interval: int = Field(default=2, ge=1, description="Ticks between two viewer frames on `/ws/world`.")
    entities_limit: int = Field(
        default=1000,
        ge=1,
        description="Entities written to `engine:entities`, lowest ids first (what `GET /api/world/entities` and the "
        "viewer's inspector read): at or above `max_population`, every Molbot can be inspected.",
    )
    world_width: float = Field(default=800.0, gt=0, description="Width of the live world.")
    world_height: float = Field(default=600.0, gt=0, description="Height of the live world.")
    initial_population: int = Field(default=200, ge=0, description="Molbots at the start.")
    min_population: int = Field(default=20, ge=0, description="Population floor: below it the engine spawns Molbots.")
    max_population: int = Field(default=1000, ge=1, description="Population cap: at it births stop.")
    initial_resources: int = Field(default=150, ge=0, description="Food at the start.")
    max_resources: int = Field(default=300, ge=0, description="Food cap.")
    resource_spawn_chance: float = Field(
        default=0.8, ge=0, le=1, description="Chance per tick that one piece of food appears."
    )
    trait_gain_chance: float = Field(
        default=0.25, ge=0, le=1, description="Chance that a newborn gains one active trait it does not carry yet."
    )
    trait_deadline_ms: float = Field(
        default=200.0,
        description="Wall clock the live trait host has for one tick before it is replaced (no trait is blamed).",
    )
    trait_host_memory: str = Field(
        default="512m",
        description="Memory limit of the live trait host's container (a process per agent with live traits).",
    )
    trait_host_pids: int = Field(default=256, ge=16, description="Process limit of the live trait host's container.")
    trait_host_cpus: float = Field(default=2.0, gt=0, description="CPU limit of the live trait host's container.")
    quarantine_report_retry_s: float = Field(
        default=3600.0,
        gt=0,
        description="How long the engine keeps retrying, in the background, to record a quarantined trait and have "
        "its mutation rolled back while Postgres or Temporal is unreachable.",
    )
    metrics_port: int = Field(
        default=9101,
        ge=0,
        le=65535,
        description="Port of the engine's `/metrics` (0: off; a taken port is logged and skipped).",
    )

    # How the trait hosts are reached.
    trait_host_socket: bool = Field(
        default=True,
        description="The live trait host talks over a Unix socket in a private directory mounted read-only into "
        "its container (needs root); false, or without root: `docker attach`.",
    )


class JournalSettings(BaseModel):
    """The world's input journal and the snapshots bound to it (docs/journal.md)."""

    enabled: bool = Field(
        default=True,
        description="The engine journals every tick's inputs and resumes its world from the journal at start; "
        "false: every start is a fresh world and nothing is recorded.",
    )
    dir: Path | None = Field(
        default=None, description="Where the journal's segments and snapshots live; empty: `<state_dir>/journal`."
    )
    snapshot_interval: int = Field(
        default=3600, ge=1, description="Ticks between two snapshots bound to the journal (a minute at 60 ticks/s)."
    )
    keep_last: int = Field(
        default=10, ge=1, description="Snapshots kept: the last this many, besides `keep_every` and pinned ones."
    )
    keep_every: int = Field(
        default=60,
        ge=0,
        description="Also kept: every Nth snapshot ever taken (0: none). Pinned too: the rollback point of each "
        "mutation still under observation.",
    )
    fsync_interval_s: float = Field(
        default=1.0,
        ge=0,
        description="Longest time between two fsyncs of the journal (0: every record). A killed engine loses "
        "nothing written; a machine that loses power loses at most this much, detected as a torn tail.",
    )
    segment_records: int = Field(default=3600, ge=1, description="Records per journal segment file.")
    archive_dir: Path | None = Field(
        default=None,
        description="Where retired segments go when the manifest's `retention.segments` is `archive` (compressed, "
        "chain-checked, replayable); empty: beside the journal, `<journal dir>-archive`.",
    )
    disk_warn_free: float = Field(
        default=0.1,
        gt=0,
        lt=1,
        description="The engine warns (log, `GET /v1/journal/status`, metric) when the journal's disk has less "
        "than this share free.",
    )
    harm_fitness: float = Field(
        default=-0.5,
        le=0,
        description="The fitness delta at or below which a trait rolled back for a population decline did harm: the "
        "feed and the worker's log suggest that an operator take the world back to before it went live (its "
        "rollback point is kept for a day). The world is never rewound without an operator.",
    )
    verify_max_ticks: int = Field(
        default=1_000_000, ge=1, description="Most ticks one `GET /v1/world/replay/verify` may replay."
    )


class RoundSettings(BaseModel):
    """Agents' members and the rounds in which they act (docs/rounds.md); a round's length is the
    manifest's `rounds.ticks`."""

    enabled: bool = Field(default=True, description="The engine runs rounds of agents' actions.")
    max_members: int = Field(
        default=100,
        ge=1,
        le=10_000,
        description="Members (Molbots agents control) held at once; an agent's first action when all are taken is "
        "409 NO_FREE_MEMBER.",
    )
    action_cpu_ms: int = Field(
        default=20,
        ge=5,
        le=10_000,
        description="CPU one submission's action code may use (a round of 100 agents' actions fits in a few seconds).",
    )
    action_deadline_ms: int = Field(
        default=3000, ge=100, le=60_000, description="Wall clock for running all of one round's submissions."
    )
    action_parallel: int = Field(
        default=1,
        ge=1,
        le=16,
        description="Submissions run at once in the action host. One leaves the other core to the API and the engine: "
        "measured on 2 cores, action submissions' p99 at 50 req/s is 36 ms with 1, 138 ms with 2, 573 ms with 16.",
    )
    max_submissions_per_agent: int = Field(
        default=3, ge=1, le=100, description="Submissions one agent may make to one round (429 ROUND_QUOTA_EXCEEDED)."
    )


class ObservationSettings(BaseModel):
    """The observation window after activation that decides keep or roll back."""

    window_ticks: int = Field(
        default=300, ge=1, description="World ticks a live trait is observed before its fitness verdict."
    )
    timeout_s: float = Field(
        default=900.0,
        gt=0,
        description="How long a workflow waits for its observation window; then the trait is kept without a verdict.",
    )
    min_carriers: int = Field(
        default=5,
        ge=1,
        description="Fewest Molbots that must carry a trait during its observation window for a fitness verdict; "
        "with fewer it is kept with fitness_verdict `inconclusive` (the world's change is not its doing).",
    )
    min_carrier_share: float = Field(
        default=0.02,
        ge=0,
        le=1,
        description="A trait's verdict also needs at least this share of the population at the window's start "
        "carrying it (0.02: 20 of 1,000): a large world needs more carriers before its change can be a trait's doing.",
    )


class VerdictSettings(BaseModel):
    """A trait's fitness verdict: an experiment in forks of the live world (docs/evolution.md)."""

    mode: Literal["experiment", "window", "off"] = Field(
        default="experiment",
        description="`experiment`: paired forks of the live world with and without the trait decide, from an "
        "interval; `window`: the world's change over the observation window decides (the seed's reading, which "
        "cannot tell one trait's doing from the rest's in a busy world); `off`: no selection by fitness — the "
        "experiment runs and its report is recorded, but every activated trait is kept whatever it says, the live "
        "ledger rolls nothing back and the built-in operator takes any live trait as a parent (the evolution "
        "bench's control for selection itself); extinction of uncarried traits and the live-set bound stay.",
    )
    horizon_ticks: int = Field(default=400, ge=10, description="Ticks each copy of a replicate runs.")
    unit_share: float = Field(
        default=0.5, gt=0, lt=1, description="Share of the Molbots alive at the fork that get the trait."
    )
    min_replicates: int = Field(default=3, ge=2, description="Replicates run before the interval is first read.")
    batch: int = Field(default=2, ge=1, description="Replicates added each time the interval is not decisive.")
    max_replicates: int = Field(
        default=9, ge=2, description="The budget: past it an undecided verdict is `inconclusive` (the trait is kept)."
    )
    margin: float = Field(
        default=0.05,
        gt=0,
        lt=1,
        description="Equivalence margin on the relative effects: `positive` when the carriers' fitness interval "
        "lies above it, `negative` below its negative (or the population's), `neutral` when inside it.",
    )
    concurrency: int = Field(
        default=1,
        ge=1,
        description="Replicates one worker runs at once (task queue `<task_queue>-verdicts`); each holds two "
        "trait-host containers and a thread of world steps.",
    )

    ledger_window: int = Field(default=10, ge=2, description="A live trait's newest ledger snapshots it is judged on.")
    ledger_min_snapshots: int = Field(
        default=5, ge=2, description="Ledger snapshots with enough carriers before a late verdict can be given."
    )
    ledger_min_carriers: int = Field(
        default=5, ge=1, description="Carriers matched with non-carriers of their age for a ledger snapshot to count."
    )
    ledger_margin: float = Field(
        default=0.2,
        gt=0,
        lt=1,
        description="A late verdict rolls a kept trait back when its ledger interval lies wholly below minus this "
        "(observational evidence: stricter than the experiment's margin).",
    )

    def ledger_rule(self) -> LedgerRule:
        return LedgerRule(
            window=self.ledger_window,
            min_snapshots=min(self.ledger_min_snapshots, self.ledger_window),
            min_carriers=self.ledger_min_carriers,
            margin=self.ledger_margin,
        )

    def experiment(self) -> ExperimentSettings | None:
        """The experiment's settings (with selection off it still runs, for the record)."""
        if self.mode == "window":
            return None
        return ExperimentSettings(
            horizon_ticks=self.horizon_ticks,
            unit_share=self.unit_share,
            min_replicates=self.min_replicates,
            batch=self.batch,
            max_replicates=max(self.max_replicates, self.min_replicates),
            margin=self.margin,
        )
