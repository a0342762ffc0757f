# Rejected on purpose: it calls open() to read a file of the machine it runs on.
#
# Verdict: rejected by the gatekeeper with AST_BANNED_CALL, before anything runs.
# Propose it: genesis propose examples/traits/rejected_open_file.py --name file_reader
# The command exits with code 3 and the validation log names the call and its line:
#   Banned calls/attrs: FAILED — Call to open() is not allowed (line 26); traits have no file
#   system
#
# Why: builtins that reach outside the trait or into Python's machinery are banned calls: open,
# eval, exec, compile, getattr, type, super, print, __import__ and more (the full list is in
# GET /api/agents/context/sandbox-api). No import is needed to call open(), which is why the
# gatekeeper checks calls as well as imports. Even code that slipped past it would run in the
# sandbox container, which has no host files and no secrets to read.
#
# To make it pass: keep what a trait knows to its entity and its own `self`.


class BaseTrait:
    """Traits define this stub themselves: imports are limited to a few standard modules."""

    pass


class FileReaderTrait(BaseTrait):
    async def execute(self, entity) -> None:
        with open("/etc/hostname") as secret:
            entity.state = secret.read()[:32]
