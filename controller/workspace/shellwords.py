"""Reading shell command lines by their words, for what they run: not a shell, a careful reader of one.

``gitpointers`` asks which of the repository's paths a command runs: a git alias, a hook, a hook
manager's ``run:`` entry. Words are split as POSIX shell splits them (quotes removed, operators apart),
and a line is split into its simple commands; what runs is judged from there (``gitpointers``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh"})
INTERPRETERS = SHELLS | frozenset({"node", "deno", "bun", "python", "python3", "ruby", "perl", "php", "tsx", "ts-node"})
"""Programs that run the file they are given, finding ``gen.js`` for ``gen``."""
PREFIXES = frozenset(
    {
        "if",
        "then",
        "else",
        "elif",
        "while",
        "until",
        "do",
        "!",
        "time",
        "command",
        "builtin",
        "exec",
        "nohup",
        "env",
        "npx",
        "uv",
        "run",
        "poetry",
        "pipenv",
        "bundle",
        "source",
        ".",
        "sudo",
    }
)
"""Words before the program a command line runs."""
BESIDE = re.compile(r"\"?\$\(dirname (?:-- )?\"?\$0\"?\)\"?|\"?\$\{0%/\*\}\"?")
"""What a script writes for its own folder (``"$(dirname "$0")"``): read as that folder."""
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
OPERATORS = frozenset({";", "&&", "||", "|", "&", "(", ")", "{", "}", ";;", "|&", "()"})
BUILT = re.compile(r"^(?:.*[)}]|\$\w+)(?=/)")
"""What a shell word builds at run time before a slash: ``"$(git rev-parse --show-toplevel)"/x``, ``$ROOT/x``."""
DECORATION = re.compile(r"^\s*[{\[]?\s*(?:-\s+)?(?:[\"']?[\w.*{},/-]+[\"']?\s*[:=]\s+)?")
"""A list item's dash and a key before a value: ``- entry: ./x.sh``, ``"*.js": "scripts/fix.sh"``."""


def commands(command: str) -> Iterator[list[str]]:
    """The simple commands of a shell line, split at its operators."""
    current: list[str] = []
    for word in words(command):
        if word in OPERATORS or set(word) <= set(";&|(){}"):
            if current:
                yield current
            current = []
        else:
            current.append(word)
    if current:
        yield current


def words(command: str) -> list[str]:
    """The words of a shell command, its operators (``;``, ``&&``, ``(``, ``{``...) apart, quotes removed."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)[:1000]
    except ValueError:
        return command.split()[:1000]
