"""Red-team findings: a repository nested in the checkout (a submodule, a vendored clone) obeys its own git
configuration, which was never read; CI definitions and git's pointers were matched in one spelling only.

``lib/`` with ``include.path=../.gitconfig``: the agent's ``lib/.gitconfig`` (``core.fsmonitor``) was an
ordinary change, and ``git status`` in lib ran it. ``lib/`` with ``core.hooksPath=.githooks``: the agent's
``lib/.githooks/pre-commit`` was applied, executable, and ``git commit`` there ran it. Both are now ``trusted``,
as at the top; so are the nested repository's hook managers' files and CI definitions, and every spelling a
case-insensitive checkout takes for a pointer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.wire.changeset import Disposition
from controller.workspace import apply, baseline, pipelines
from controller.workspace.gitpointers import BEYOND_NESTED, MAX_NESTED, Index, Pointer, pointers
from tests.unit.workspace.overlay import OWNER, Workspace, chown_tree
from tests.unit.workspace.test_git_pointers import HOOK, as_git_checkout, git, judged


def with_nested(ws: Workspace, folder: str, *config: tuple[str, str]) -> None:
    """Make ``folder`` of the checkout a repository of its own with ``config``, and start the session over it."""
    (ws.repo / folder).mkdir(parents=True, exist_ok=True)
    git(ws.repo / folder, "init", "-q")
    for key, value in config:
        git(ws.repo / folder, "config", key, value)
    chown_tree(ws.repo, OWNER)
    ws.restart()


def held_back(ws: Workspace, written: str) -> str:
    """The reason ``written`` is trusted; asserts that a plain apply left it out and a forced one writes it."""
    ws.stop()
    disposition, reason = judged(ws, written)
    assert disposition == Disposition.TRUSTED, (written, disposition, reason)
    plain = apply(ws.layer)
    assert "notes.txt" in plain.applied and written not in plain.applied
    assert not (ws.repo / written).exists(), f"{written} reached the checkout without being forced"
    assert written in apply(ws.layer, force=[written]).applied
    return reason


def test_a_config_file_a_nested_repository_includes_is_held_back(ws: Workspace) -> None:
    with_nested(ws, "lib", ("include.path", "../.gitconfig"))
    ws.agent("printf '[core]\\n\\tfsmonitor = \"touch PWNED\"\\n' > lib/.gitconfig && echo ok > notes.txt")
    reason = held_back(ws, "lib/.gitconfig")
    assert "include.path" in reason and "nested repository lib" in reason


def test_a_hook_in_a_nested_repositorys_hooks_path_is_held_back(ws: Workspace) -> None:
    with_nested(ws, "vendor/lib", ("core.hooksPath", ".githooks"))
    ws.agent(
        f"mkdir -p vendor/lib/.githooks && printf '{HOOK}' > vendor/lib/.githooks/pre-commit"
        " && chmod +x vendor/lib/.githooks/pre-commit && echo ok > notes.txt"
    )
    assert "core.hookspath" in held_back(ws, "vendor/lib/.githooks/pre-commit").lower()


@pytest.mark.parametrize(
    "written",
    ["lib/.husky/pre-commit", "lib/.gitmodules", "lib/.pre-commit-config.yaml", "lib/.github/workflows/ci.yml"],
)
def test_a_nested_repositorys_hook_managers_and_ci_definitions_are_held_back(ws: Workspace, written: str) -> None:
    with_nested(ws, "lib")
    ws.agent(f"mkdir -p $(dirname {written}) && printf '{HOOK}' > {written} && echo ok > notes.txt")
    held_back(ws, written)


def test_a_folder_that_is_no_repository_stays_ordinary(ws: Workspace) -> None:
    """Only the repositories the checkout held at the start count: ``src/`` holds none."""
    with_nested(ws, "lib")
    ws.agent(
        "mkdir -p src/.github/workflows src/.husky && echo x > src/.github/workflows/ci.yml && echo x > src/.husky/x"
    )
    ws.stop()
    assert judged(ws, "src/.github/workflows/ci.yml")[0] == Disposition.APPLY
    assert judged(ws, "src/.husky/x")[0] == Disposition.APPLY


def test_a_submodules_gitfile_is_found_and_its_configuration_read(ws: Workspace) -> None:
    """A submodule's ``.git`` is a file naming its git directory under the top's ``.git/modules``."""
    as_git_checkout(ws)
    (ws.repo / ".git/modules").mkdir()
    git(ws.repo, "init", "-q", "--separate-git-dir", str(ws.repo / ".git/modules/sub"), str(ws.repo / "sub"))
    git(ws.repo / "sub", "config", "core.hooksPath", "hooks-here")
    assert (ws.repo / "sub/.git").is_file()
    assert baseline.record(ws.repo).nested == ["sub"]
    found = {p.path for p in pointers(ws.repo, nested=["sub"])}
    assert {"sub/hooks-here", "sub/.husky"} <= found


def test_past_the_bound_a_nested_repository_is_held_back_whole(tmp_path: Path) -> None:
    """Reading each one costs a few git runs: beyond ``MAX_NESTED`` nothing in one is let through unforced."""
    nested = [f"vendor/r{n}" for n in range(MAX_NESTED + 1)]
    last = [p for p in pointers(tmp_path, nested=nested) if p.path == nested[-1]]
    assert last and last[0].directory and last[0].why == BEYOND_NESTED


@pytest.mark.parametrize("written", [".GitHooks/pre-commit", ".Husky/pre-commit", ".GITMODULES", ".githooKS"])
def test_a_pointer_is_matched_in_any_case(ws: Workspace, written: str) -> None:
    """On a case-insensitive checkout these are the files git runs and reads."""
    as_git_checkout(ws, ("core.hooksPath", ".githooks"))
    ws.agent(f"mkdir -p $(dirname {written}) && printf '{HOOK}' > {written} && echo ok > notes.txt")
    held_back(ws, written)


@pytest.mark.parametrize(
    "path",
    [
        ".build.yml",
        ".builds/deploy.yml",
        "buildkite.yml",
        "buildkite.json",
        "cloudbuild.json",
        ".codecatalyst/workflows/deploy.yaml",
        ".teamcity/settings.kts",
        ".harness/pipeline.yaml",
        "codefresh.yml",
        "jenkins-x.yml",
        ".lighthouse/jenkins-x/triggers.yaml",
        "renovate.json",
        "renovate.json5",
        ".github/renovate.json",
        ".renovaterc",
        ".renovaterc.json",
        ".readthedocs.yaml",
        ".readthedocs.yml",
        "amplify.yml",
        "netlify.toml",
        "vercel.json",
        "render.yaml",
        ".do/app.yaml",
        "heroku.yml",
        ".gitpod.yml",
        ".workflow/master.yml",
        ".onedev-buildspec.yml",
        ".github/workflow\u017f/evil.yml",
        "Vercel.JSON",
    ],
)  # fmt: skip - a table
def test_more_ci_and_build_service_definitions_are_named(path: str) -> None:
    why = pipelines.why(path, False)
    assert why is not None and "--force PATH" in why, path


def test_ci_definitions_count_at_a_nested_repositorys_top_in_any_case() -> None:
    nested = frozenset({"vendor/lib"})
    assert pipelines.why("vendor/lib/.github/workflows/ci.yml", False, nested) is not None
    assert pipelines.why("Vendor/LIB/.GitLab-CI.yml", False, nested) is not None
    assert pipelines.why("vendor/lib/.github", False, nested) is not None  # a link there would lead the CI away
    assert pipelines.why("vendor/lib/src/.github/workflows/ci.yml", False, nested) is None
    assert pipelines.why("vendor/.github/workflows/ci.yml", False, nested) is None


def test_the_index_finds_what_trying_each_pointer_finds_among_many_folders() -> None:
    """Nested repositories bring many directory pointers: the lookup by each folder a path lies in finds the
    first that covers it, as trying them in order does (in any case)."""
    kinds = ((".githooks", True), (".husky", True), (".gitmodules", False))
    listed = (
        *(Pointer(f"vendor/r{n}/{name}", is_dir, name) for n in range(40) for name, is_dir in kinds),
        Pointer("vendor/r3", True, "beyond"),
    )
    index = Index(listed)
    for path in (
        "vendor/r3/.githooks/pre-commit",
        "vendor/r7/.husky/x/y",
        "vendor/r7/.husky",
        "vendor/r7",
        "vendor/r39/.gitmodules",
        "vendor/r39/src/a.py",
        "vendor/r4/.githooksx",
        "vendor",
        "other",
    ):
        for is_dir in (True, False):
            brute = next((p for p in listed if p.covers(path, is_dir)), None)
            assert index.covering(path, is_dir) == brute, (path, is_dir)
            assert index.covering(path.upper(), is_dir) == brute, (path, is_dir)
