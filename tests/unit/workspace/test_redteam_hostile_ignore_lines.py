"""A remote repository's ``.gitignore`` and ``.dockerignore`` are hostile input (issue 45): their rules are matched
against every changed path of a session on it, so no line may make a match slow (the red-team's reproductions first)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HUNG_S = 60.0
"""Long enough for any working match on a slow, shared machine; a hung one takes years."""

DOCKERIGNORE = """
from controller.workspace.buildinputs import BuildInputs
inputs = BuildInputs(context="", ignore=("*a" * 16 + "*b",))
print(inputs.copied_whole("a" * 40))
"""

PROGRAM = """
from controller.workspace.ignore import IgnoreRules
rules = IgnoreRules({"": "*a" * 16 + "*b\\n"})
print(rules.ignored("a" * 40, False))
"""


def test_a_hostile_gitignore_line_does_not_hang_the_match_of_a_changed_path() -> None:
    """One line of ``*a`` repeated, then ``*b``, in a remote's ``.gitignore`` becomes a regex that backtracks
    exponentially (pathspec's ``[^/]*a[^/]*a...``): a 40-character name the agent writes, or a build makes, then
    takes longer than any walk's timeout to judge, so every change listing, patch and push of the session fails
    (12 repetitions already take 12 s per path here). git's own wildmatch answers it at once. The match runs in
    a child process, so that a hung one can be stopped."""
    try:
        done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=HUNG_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"matching one 40-character name against the rule hung (over {HUNG_S:g} s)") from None
    assert done.stdout.strip() == "False", done.stderr[-2000:]


def test_a_hostile_dockerignore_line_does_not_hang_the_judgement_of_a_changed_path() -> None:
    """The same line in the ``.dockerignore`` of a remote whose environment's Dockerfile copies its context whole
    (``COPY . /app``): every changed path is judged by the Docker SDK's ``PatternMatcher``, whose ``[^/]*a...``
    regex backtracks the same way (12 repetitions: 9 s per path here)."""
    try:
        done = subprocess.run([sys.executable, "-c", DOCKERIGNORE], capture_output=True, text=True, timeout=HUNG_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"judging one 40-character name against the rule hung (over {HUNG_S:g} s)") from None
    assert done.stdout.strip() == "True", done.stderr[-2000:]


def test_git_semantics_hold_for_ordinary_lines_across_compiled_chunks() -> None:
    """Lines are compiled a few hundred at a time: the last matching line still wins, whichever chunk it is in."""
    from controller.workspace.ignore import CHUNK_LINES, IgnoreRules

    filler = [f"never{n}.tmp" for n in range(CHUNK_LINES)]
    rules = IgnoreRules({"": "\n".join(["*.log", *filler, "!keep.log", "build/", "/top.txt"]) + "\n"})
    assert rules.ignored("a/debug.log", False)
    assert not rules.ignored("a/keep.log", False)
    assert rules.ignored("src/build/out.o", False)
    assert rules.ignored("top.txt", False)
    assert not rules.ignored("sub/top.txt", False)


def test_a_name_that_is_not_utf8_is_matched_like_any_other() -> None:
    """A byte that is not UTF-8 (surrogate-escaped in the path) is still one character to ``?`` and ``*``."""
    from controller.workspace.buildinputs import BuildInputs
    from controller.workspace.ignore import IgnoreRules

    rules = IgnoreRules({"": "*.bin\nx?y\n"})
    assert rules.ignored("data\udcff.bin", False)
    assert rules.ignored("x\udcffy", False)
    assert not rules.ignored("x\udcff\udcfey", False)
    inputs = BuildInputs(context="", ignore=("*.bin",))
    assert not inputs.copied_whole("data\udcff.bin")
    assert inputs.copied_whole("data\udcff.txt")


def test_lines_under_the_bound_match_in_linear_time_too() -> None:
    """Sixteen wildcards are within the bound and compiled: on Python's ``re`` they would take years on a
    40-character name, as the red-team's seventeen; on RE2 the answer comes at once (a child process again,
    so that a hung match can be stopped)."""
    program = PROGRAM.replace('"*a" * 16', '"*a" * 15') + DOCKERIGNORE.replace('"*a" * 16', '"*a" * 15')
    try:
        done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=HUNG_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"matching one 40-character name against the rules hung (over {HUNG_S:g} s)") from None
    assert done.stdout.split() == ["False", "True"], done.stderr[-2000:]


def test_a_line_over_the_bound_decides_nothing_and_the_others_still_count() -> None:
    """A line of thousands of wildcards (written only to attack) is not compiled: it hides nothing, so what it
    names is listed; a re-inclusion over the bound re-includes everything below its file (listed, never lost);
    the file's other lines keep their meaning."""
    from controller.workspace.ignore import MAX_LINE_CHARS, IgnoreRules

    rules = IgnoreRules({"": "*.log\n" + "*a" * 20_000 + "*b\n" + "secret.txt\n" + "x" * (MAX_LINE_CHARS + 1)})
    assert rules.ignored("x.log", False)
    assert rules.ignored("secret.txt", False)
    assert not rules.ignored("a" * 40 + "b", False)
    rules = IgnoreRules({"": "*.log\n", "sub": "!" + "*a" * 20 + "*.log\n"})
    assert rules.ignored("x.log", False)
    assert not rules.ignored("sub/x.log", False)


def test_a_dockerignore_is_judged_as_the_docker_sdk_judges_ordinary_lines() -> None:
    """The RE2 matcher gives the SDK's ``PatternMatcher`` verdict for ordinary lines: exceptions, ``**``, classes,
    case, a line naming a directory, ``..`` cleaned away, and ``.dockerignore`` itself never left out."""
    from docker.utils.build import PatternMatcher

    from controller.workspace.dockerignore import DockerIgnore

    lines = ["*.md", "!README.md", "**/node_modules", "build", "docs/**/*.png", "[Tt]mp?", "a/../cache", "*"[:0] + "."]
    paths = [
        "README.md", "notes.md", "src/notes.md", "node_modules/x.js", "web/node_modules/a/b.js", "build/out.o",
        "build", "src/build/x", "docs/a/b/c.PNG", "docs/c.png", "tmp1", "Tmp2", "tmp12", "cache/x", ".dockerignore",
        "src/main.py", "NOTES.MD",
    ]  # fmt: skip
    ours, sdk = DockerIgnore(lines), PatternMatcher(lines)
    assert [ours.matches(path) for path in paths] == [bool(sdk.matches(path)) for path in paths]
    assert any(ours.matches(path) for path in paths) and not all(ours.matches(path) for path in paths)


def test_a_dockerignore_line_over_the_bound_is_refused_naming_the_line() -> None:
    """A build's context is not listed past a line over the bound: the error names it (the build is refused, so
    nothing is built from a context judged otherwise); a listing's judgement of changed paths then counts nothing
    as left out (more is held for acknowledgement, nothing lost)."""

    from controller.workspace.buildinputs import BuildInputs
    from controller.workspace.dockerignore import DockerIgnore

    hostile = "*a" * 200 + "*b"
    with pytest.raises(ValueError, match=r"line 2 of the \.dockerignore"):
        DockerIgnore(["*.log", hostile])
    assert BuildInputs(context="", ignore=("*.log", hostile)).copied_whole("x.log")
