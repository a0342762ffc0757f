"""Agents' round actions: the proxy an action's code acts on (it records, never executes), and
the check of what a one-shot worker sends back. Standard library only."""

import math

from .wire import MAX_INT, TraitLimit, plain

TYPE_CHECKING = False  # typing is the type checker's alone (see wire.py)
if TYPE_CHECKING:
    from typing import Any, NoReturn

    from .wire import Message

MAX_ACTIONS = 16  # recorded actions of one submission


MAX_ACTION_ITEMS = 1000  # submissions in one act request


ACT_PARALLEL_MAX = 16  # one-shot workers alive at once (the request's "parallel", default 1)


MAX_ACTION_CODE = 64 * 1024


MAX_MESSAGE_CHARS = 280


ACTION_KINDS = {"move": 2, "move_towards": 2, "eat": 0, "share": 2, "attack": 1, "message": 2}  # kind -> arguments


ACTION_ERRORS = (
    "bad_request",  # the item itself is malformed
    "syntax_error",  # the code does not compile
    "no_entry_point",  # no function agent_action(engine, member_id)
    "timeout",  # it ran past its CPU budget
    "memory",  # it ran out of its memory
    "error",  # it raised
    "too_many_actions",  # it recorded more than MAX_ACTIONS
    "bad_actions",  # what came back is not plain actions
    "killed",  # its process died or was killed (a C-level loop, the container's memory)
    "deadline",  # it had not finished when the request's deadline came
)


def action_failure(code: str, detail: object) -> "Message":
    return {"ok": False, "error": code, "detail": str(detail)[:500]}


def checked_action_reply(reply: object) -> "Message":
    """A one-shot worker's answer rebuilt from plain values: a failure with a known code, or
    actions of known kinds and arities with plain arguments."""
    if type(reply) is not dict:
        return action_failure("bad_actions", "its process sent no answer")
    if reply.get("ok") is not True:
        code = reply.get("error")
        return action_failure(code if code in ACTION_ERRORS else "error", reply.get("detail", ""))
    actions = reply.get("actions")
    if type(actions) is not list or len(actions) > MAX_ACTIONS:
        return action_failure("bad_actions", "actions must be a list of at most %d" % MAX_ACTIONS)
    out = []
    for action in actions:
        if type(action) is not list or not action or ACTION_KINDS.get(action[0]) != len(action) - 1:
            return action_failure("bad_actions", "an action is [kind, arguments...] of a known kind")
        args = []
        for value in action[1:]:
            kind = type(value)
            number = (kind is int and abs(value) <= MAX_INT) or (kind is float and math.isfinite(value))
            if number or (kind is str and len(value) <= MAX_MESSAGE_CHARS):
                args.append(value)
            else:
                return action_failure("bad_actions", "action arguments are finite numbers or short strings")
        out.append([action[0]] + args)
    return {"ok": True, "actions": out}


class NoEntryPoint(Exception):
    pass


class Seen:
    """A read-only record of what a member sees (its own copy: nothing written to it matters)."""

    def __init__(self, values: "dict[str, Any]") -> None:
        for key, value in values.items():
            if type(key) is str and key.isidentifier():
                object.__setattr__(self, key, value)

    def __setattr__(self, name: str, value: object) -> "NoReturn":
        raise AttributeError("what a member sees is read-only")

    def __repr__(self) -> str:
        return "Seen(%s)" % ", ".join("%s=%r" % kv for kv in sorted(vars(self).items()))


class ActionProxy:
    """The ``engine`` an agent's action code gets: what its member sees, and methods that record
    actions (the world applies them after checking them again). It acts only through its own
    member: any other ``member_id`` is a PermissionError."""

    def __init__(self, state: "dict[str, Any]") -> None:
        self.member_id = state.get("member_id")
        self.round_id = state.get("round_id")
        self.member = Seen(state.get("member") or {})
        self.neighbours = [Seen(n) for n in state.get("neighbours") or () if type(n) is dict]
        self.resources = [Seen(r) for r in state.get("resources") or () if type(r) is dict]
        self.world = Seen(state.get("world") or {})
        # messages other members sent this one in the round before: from_member_id, text, round_id
        self.inbox = [Seen(m) for m in state.get("inbox") or () if type(m) is dict]
        self._recorded: list[list[Any]] = []  # [kind, arguments...] of each recorded action

    def _record(self, member_id: object, kind: str, *args: object) -> None:
        if member_id != self.member_id or type(member_id) is not int:
            raise PermissionError("an agent acts only through its own member (%r)" % (self.member_id,))
        if len(self._recorded) >= MAX_ACTIONS:
            raise TraitLimit("more than %d actions in one submission" % MAX_ACTIONS)
        self._recorded.append([kind] + [plain(a) for a in args])

    def move(self, member_id: object, dx: object, dy: object) -> None:
        self._record(member_id, "move", dx, dy)

    def move_towards(self, member_id: object, x: object, y: object) -> None:
        self._record(member_id, "move_towards", x, y)

    def eat(self, member_id: object) -> None:
        self._record(member_id, "eat")

    def share(self, member_id: object, target_id: object, amount: object) -> None:
        """Give ``amount`` of the member's energy to a neighbour."""
        self._record(member_id, "share", target_id, amount)

    def attack(self, member_id: object, target_id: object) -> None:
        self._record(member_id, "attack", target_id)

    def send_message(self, member_id: object, to_member_id: object, text: object) -> None:
        self._record(member_id, "message", to_member_id, str(text)[:MAX_MESSAGE_CHARS] if type(text) is str else text)
