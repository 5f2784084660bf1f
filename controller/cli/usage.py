"""Usage errors: a pydantic validation error about a flag or a variable, as sentences a person can act on.

Each names what was given (``--max-steps 0``, ``CUBICLE_LIMITS__MAX_STEPS='x'``), says what is wrong
with it, and what would be right, from the field's own type and bounds; secrets are never echoed.
"""

from __future__ import annotations

from typing import Any

import annotated_types
from pydantic import BaseModel, ValidationError

from ..config import Settings
from ..wire.limits import Limits

LIMIT_FLAGS = {
    "max_steps": "--max-steps",
    "token_budget": "--token-budget",
    "wall_clock_s": "--timeout",
    "command_timeout_s": "--command-timeout",
    "memory_mb": "--memory",
    "cpus": "--cpus",
    "disk_mb": "--disk",
    "inodes": "--inodes",
    "network": "--network",
}
"""The ``cubicle run`` flag that sets each limit."""
SECRET_SETTINGS = {"api_key", "api_token", "git_remotes"}  # a pattern may carry a token by mistake
WRONG = {
    "greater_than": "is too small",
    "greater_than_equal": "is too small",
    "less_than": "is too large",
    "less_than_equal": "is too large",
    "int_parsing": "is not a whole number",
    "int_from_float": "is not a whole number",
    "float_parsing": "is not a number",
    "bool_parsing": "is not true or false",
    "extra_forbidden": "is not a setting",
    "path_type": "is not a path",
}
"""What is wrong, for pydantic's error types a person meets in flags and variables."""


BOUNDS = {
    annotated_types.Ge: ("ge", "at least"),
    annotated_types.Gt: ("gt", "above"),
    annotated_types.Le: ("le", "at most"),
    annotated_types.Lt: ("lt", "below"),
}  # fmt: skip - a table
"""How each bound of a field reads: the rule's attribute, and the words before its value (lower bounds first)."""

KINDS = {int: "a whole number", float: "a number", bool: "true or false", str: "text"}
"""How a value of each field type reads."""


def _expected(model: type[BaseModel], name: str) -> str:
    """What a valid value of ``model.name`` looks like, from the field's type and bounds."""
    field = model.model_fields.get(name)
    if field is None:
        return ""
    if name == "repo_roots":
        return 'a JSON list of directories such as ["/srv/repos"], or directories separated by commas'
    kind = KINDS.get(field.annotation, "")  # type: ignore[arg-type]
    given = {type(rule): rule for rule in field.metadata if type(rule) in BOUNDS}
    bounds = {word: getattr(given[rule], attr) for rule, (attr, word) in BOUNDS.items() if rule in given}
    if field.annotation is int and bounds.keys() == {"at least", "at most"}:
        return f"{kind} from {bounds['at least']} to {bounds['at most']}"
    return " ".join([kind, " and ".join(f"{word} {value}" for word, value in bounds.items())]).strip()


def _problem(subject: str, model: type[BaseModel], error: Any, show_value: bool = True) -> str:
    """One sentence: what was given, what is wrong with it, and what would be right."""
    field = str(error["loc"][0]) if error["loc"] else ""
    if error["type"] == "value_error":
        wrong = str(error.get("ctx", {}).get("error", error["msg"]))
    else:
        wrong = WRONG.get(error["type"], error["msg"][:1].lower() + error["msg"][1:])
    given = f"{subject}={error['input']!r}"[:120] if show_value and "input" in error else subject
    if error["type"] == "extra_forbidden":
        kind = "limits" if model is Limits else "settings"
        return f"{given} {wrong}; the {kind} are: {', '.join(model.model_fields)}."
    expected = _expected(model, field)
    return f"{given} {wrong}" + (f"; use {expected}." if expected else ".")


def _variable(loc: tuple[Any, ...]) -> str:
    """The environment variable behind a settings error location: ('limits', 'max_steps') is CUBICLE_LIMITS__MAX_STEPS."""
    names = [str(part) for part in loc if not isinstance(part, int)]
    if names and names[0].isupper():
        return names[0]
    return "CUBICLE_" + "__".join(name.upper() for name in names)


def environment_problems(err: ValidationError) -> str:
    """What is wrong with the ``CUBICLE_`` (and ``ANTHROPIC_``) variables, one sentence each."""
    problems = []
    for error in err.errors():
        loc = tuple(error["loc"])
        model: type[BaseModel] = Limits if len(loc) > 1 and loc[0] in ("limits", "max_limits") else Settings
        inner = {**error, "loc": loc[1:]} if model is Limits else error
        secret = bool(loc) and loc[0] in SECRET_SETTINGS
        problems.append(_problem(_variable(loc), model, inner, show_value=not secret))
    return " ".join(problems)


def limit_problems(err: ValidationError, given: dict[str, Any]) -> str:
    """What is wrong with the limits: named by the flag when one was ``given``, else by its variable."""
    problems = []
    for error in err.errors():
        field = str(error["loc"][0])
        flag = LIMIT_FLAGS.get(field) if field in given else None
        subject = flag or f"CUBICLE_LIMITS__{field.upper()}"
        problems.append(_problem(subject, Limits, error).replace(f"{subject}=", f"{subject} ", 1))
    return " ".join(problems)
