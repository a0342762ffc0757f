"""Step 2, schema: the request's fields before anything is parsed."""

from __future__ import annotations

from gatekeeper.tables import MAX_CODE_BYTES, TRAIT_NAME


def schema_problems(trait_name: object, code: object) -> list[str]:
    """What is wrong with the request fields, as messages a person can act on."""
    problems: list[str] = []
    if not isinstance(trait_name, str):
        problems.append(f"trait_name must be a string, got {type(trait_name).__name__}")
    elif TRAIT_NAME.fullmatch(trait_name) is None:
        problems.append(
            f"trait_name {trait_name!r} must be snake_case: lowercase letters, digits and "
            "underscores, starting with a letter (max 64 chars)"
        )
    if not isinstance(code, str):
        problems.append(f"code must be a string, got {type(code).__name__}")
        return problems
    if not code:
        problems.append("code is empty; submit the Python source of a trait class")
        return problems
    if code.isspace():
        problems.append("code contains only whitespace; submit the Python source of a trait class")
        return problems
    try:
        size = len(code.encode("utf-8"))
    except UnicodeEncodeError as error:
        problems.append(f"code is not valid UTF-8 text (character {error.start} is a lone surrogate)")
        return problems
    if size > MAX_CODE_BYTES:
        problems.append(f"code is {size:,} bytes; the limit is {MAX_CODE_BYTES:,}")
    nul = code.find("\0")
    if nul >= 0:
        problems.append(f"code contains a NUL byte on line {code.count(chr(10), 0, nul) + 1}; remove it")
    return problems
