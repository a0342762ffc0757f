"""The trait host: runs untrusted trait code inside a sandbox container. Standard library only.

Run by ``sandbox/trait_host.py``; its modules: ``supervisor``, ``worker`` (the zygote and the
workers), ``limits``, ``wire``, ``actions``.

The container is the boundary between trait code and Genesis. Inside it, the agent is the
boundary between traits: three kinds of process, so that one agent's code can neither see,
change nor starve another's.

* The **supervisor** (this program's first process) speaks the protocol with the trusted side
  (the sandbox activity in the worker, the live engine) and never runs trait code. It routes each
  trait to its agent's worker, forwards every tick's views to the workers that have traits to
  run, enforces their limits from outside (a ``SIGKILL`` cannot be ignored), blames the trait
  that was running, and merges the replies.
* The **zygote**, forked once at ``hello`` after the allowed modules are imported, never holds a
  trait's source or a tick's data; it only forks workers. So a worker inherits a pristine
  interpreter: nothing another agent's trait wrote, loaded or received is in its memory.
* One **worker** per agent (traits of different agents never share an interpreter), and one per
  *suspect* trait: a trait whose worker was killed while it ran is confirmed alone, in a worker
  of its own, before it is blamed (a machine hiccup never quarantines a harmless trait). A
  worker has an address-space limit of its own, and an unload recycles the agent's worker (a
  fresh fork with the agent's other traits loaded again), so a trait leaves nothing behind.

Every process is non-dumpable (no ptrace, no reading another's memory through /proc).

Protocol: JSON lines over stdin/stdout, or, when GENESIS_HOST_SOCKET names one, a Unix socket
this program connects to (the live engine's private channel, see sandbox/container.py).

  {"op": "hello", "entity_api": {...}, "allowed_imports": [...], "call_timeout_ms": 5,
   "tick_cpu_ms": 100, "tick_deadline_ms": 150, "worker_memory_mb": 128, "max_intents_per_call": 16,
   "idle": false}
      -> {"ok": true, "op": "hello", "python": "3.11.2", "implementation": "cpython", "idle": false}
  ("idle": true puts every process of the host in the idle scheduling class: a fork's host.)
  {"op": "load", "trait": NAME, "source": CODE, "class_name": CLS, "agent": AGENT_ID,
   "suspect": false, "background": false}
      -> {"ok": true, "op": "load", "trait": NAME} | {"ok": false, "op": "load", "error": ...}
      A suspect runs in a worker of its own. A worker loads its traits one at a time while the
      supervisor goes on answering ticks (a load's CPU beyond two calls' hard limits fails it:
      the trait's own cost). Without "background" the answer waits for this trait's load (put
      first in line); with it the answer is at once ({"ok": true, "pending": true}) and the
      outcome comes with a later ``views`` reply.
  {"op": "unload", "trait": NAME}                  -> {"ok": true, "op": "unload"}
  {"op": "stats"} -> {"ok": true, "op": "stats", "supervisor_rss_kb": n, "workers": [{"agent": A,
      "traits": [...], "solo": bool, "pid": p, "rss_kb": n, "cpu_ms": t, "blocks": b}, ...]}
  {"op": "views", "tick": N, "fields": [NAME, ...], "world": {NAME: value, ...},
   "trait_sets": [[TRAIT, ...], ...], "run": [TRAIT, ...], "columns": [...], "count": n}
      Every carrier's view is sent once, as the values of ``fields`` (its "traits" value is an
      index into ``trait_sets``); ``world`` holds the values shared by every entity. A column is
      a JSON list, {"f8"|"i8"|"i4": base64 of a little-endian float64/int64/int32 array, or
      [offset, length] of those bytes in the request's attachment}, {"text": [offset, length]}
      (UTF-8 strings joined by "\\x1f" in the attachment) or {"same": value} (every one of the
      ``count`` rows holds it); a NaN ``nearest_dx`` means no resource in range. Each trait of
      ``run`` runs, in that order, on the rows whose trait set contains it. Optional
      "deadline_ms" overrides the hello's tick deadline; "count_blocks": true adds each worker's
      allocated memory blocks to its traits' results ("blocks"). A worker still starting (forked again
      after a kill or an unload, loading its traits) sits the tick out, its traits' results
      "lost", and so does an agent over its fair share of CPU (see ``Fairness``; "throttled":
      why), unless "complete" is true: then every trait runs (a starting worker is waited for,
      within half the deadline; nobody is throttled), as fast-forward, sandbox tests and shadows
      need to equal a paced run.
      -> {"ok": true, "op": "views", "tick": N, "intent_groups": [COLUMNS, ...],
          "results": {TRAIT: {"calls": n, "total_us": t, "max_us": m, "errors": [...],
          "error_count": k, "timeouts": [ids], "intents": i, "blocks": b}}, "group_agents": [AGENT, ...],
          "loads": {TRAIT: {"ok": true} | {"ok": false, "error": ...}}}
      One group of intent columns (see ``IntentColumns``) per trait that ran, entities ascending
      within each: the groups of each worker in the order of its first trait in ``run``, each
      worker's in ``run`` order; ``group_agents`` names the agent whose worker sent each group
      (the trusted side accepts a group's intents only for carriers of that agent's traits).
      An entity's intents are its groups' in that order. A trait's
      result may also say "killed": why (its worker was killed while it ran; "confirmed": true
      when it ran alone) or "lost": why (its worker was killed for another trait's fault or the
      machine was too busy: nobody's fault, no intents). ``loads`` (only when there are any):
      the outcomes of background loads that ended since the last reply.
  {"op": "act", "items": [{"id": ID, "agent": AGENT, "code": CODE, "state": STATE}, ...],
   "cpu_ms": 20, "deadline_ms": 2000, "parallel": 1}
      Agents' round actions: each item's ``agent_action(engine, member_id)`` runs once, in a
      fresh worker of its own (forked for it, killed after it), against a proxy of its member
      and what the member sees (STATE: "member_id", "round_id", "member", "neighbours",
      "resources", "world"). Calls on the proxy are recorded, never executed. Each AGENT has an
      equal share of ``deadline_ms``; its items' wall time is charged to it, and an item past its
      agent's share ends "deadline".
      -> {"ok": true, "op": "act", "results": {ID: {"ok": true, "actions": [[KIND, ...], ...]}
          | {"ok": false, "error": CODE, "detail": TEXT}}}
      CODE is one of ACTION_ERRORS.
Attachments: a line with "attachment": N is followed by N raw bytes, which columns name by
[offset, length]. A ``views`` request with an attachment is answered in kind.
The host exits when stdin (or the socket) closes.
"""
