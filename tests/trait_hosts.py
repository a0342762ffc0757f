"""Talking to a real trait-host container from tests: start one, load traits as agents, and run
ticks of a small seeded world through the live engine's ``views`` request."""

from __future__ import annotations

import ast
from typing import Any

import docker

from engine.core.world import World, WorldParams
from genesis.config import Settings
from genesis.trait_wire import decode_intent_groups
from pipeline import registry
from sandbox import image
from sandbox.container import IsolationLimits, TraitHostContainer, hello_message

LIMITS = IsolationLimits("256m", 64, 1.0)


def hello(settings: Settings | None = None, tick_deadline_s: float = 5.0) -> dict[str, Any]:
    return hello_message(settings or Settings().override(sandbox_call_timeout_ms=50), tick_deadline_s)


def start(
    client: docker.DockerClient,
    owner: str,
    limits: IsolationLimits = LIMITS,
    settings: Settings | None = None,
    private_socket: bool = False,
) -> TraitHostContainer:
    host = TraitHostContainer(client, image.ensure(client), limits, owner, private_socket=private_socket)
    try:
        host.say_hello(hello(settings), 20)
    except BaseException:
        host.close()
        raise
    return host


def load(host: TraitHostContainer, trait: str, source: str, agent: str = "", class_name: str | None = None) -> dict:
    class_name = class_name or trait_class(source)
    return host.request({"op": "load", "trait": trait, "source": source, "class_name": class_name, "agent": agent}, 10)


def registry_entry(name: str, source: str, agent: str, number: int, prefix: str = "c0a") -> registry.RegistryEntry:
    """A live version of trait ``name`` (``source``) by ``agent``, as the registry holds it;
    ``number`` and ``prefix`` make its mutation id and code hash unique."""
    return registry.RegistryEntry(
        trait_name=name,
        version=1,
        mutation_id=f"mut_{prefix}{number:09d}",
        class_name=trait_class(source),
        code=source,
        code_hash=f"{number:064d}",
        agent_id=agent,
    )


async def register(redis: Any, traits: dict[str, tuple[str, str]], first: int, prefix: str = "c0a") -> None:
    """Put ``traits`` (name -> (source, agent)) in the registry as live versions."""
    for i, (name, (source, agent)) in enumerate(traits.items()):
        await registry.put_entry(redis, registry_entry(name, source, agent, first + i, prefix))


def crowd(traits: list[str], population: int, seed: int, born_together: bool = False) -> World:
    """A world of a constant ``population`` whose every Molbot carries all of ``traits``
    (``born_together``: all of age 0, so a trait gated on age acts on all at once)."""
    params = WorldParams(
        initial_population=population,
        min_population=population,
        max_population=population,
        max_traits_per_entity=max(5, len(traits)),
    )
    w = World(params, seed=seed)
    if born_together:
        for entity in w.entities.values():
            entity.age = 0
    w.set_available_traits(sorted(traits))
    for name in traits:
        w.give_trait_to_all(name)
    return w


def trait_class(source: str) -> str:
    """The class of ``source`` that defines ``async def execute``."""
    return next(
        node.name
        for node in ast.parse(source).body
        if isinstance(node, ast.ClassDef)
        and any(isinstance(f, ast.AsyncFunctionDef) and f.name == "execute" for f in node.body)
    )


def world(traits: list[str], population: int = 12, seed: int = 3) -> World:
    w = World(WorldParams(initial_population=population, min_population=0), seed=seed)
    w.set_available_traits(traits)
    for name in traits:
        w.give_trait_to_all(name)
    return w


def tick(
    host: TraitHostContainer,
    w: World,
    run: list[str],
    deadline_s: float = 10.0,
    workers_ms: float | None = None,
    complete: bool = True,
) -> dict[str, Any]:
    """One ``views`` request for ``w``'s carriers; the reply with its intents decoded
    (``"intents"``: ``{entity_id: [intent, ...]}``). ``complete``: every trait runs (no worker
    sits the tick out for starting or for its agent's CPU), as tests that compare ticks need."""
    message = {"op": "views", "tick": w.tick, **w.trait_views(run), "run": run, "complete": complete}
    if workers_ms is not None:  # the workers' deadline, instead of the hello's
        message["deadline_ms"] = workers_ms
    reply = host.request(message, deadline_s)
    assert reply.get("ok"), reply
    reply["intents"] = dict(decode_intent_groups(reply["intent_groups"]))
    return reply
