"""Ignore files the session's own tools write (pytest's ``.pytest_cache/.gitignore`` of ``*``): they hold more back,
only inside a directory the session made, and never hide or release anything else."""

from __future__ import annotations

from controller.wire.changeset import Disposition
from controller.workspace import apply, scan
from controller.workspace.ignore import MAX_TOOL_IGNORE_BYTES, tool_rules_text
from tests.unit.workspace.overlay import Workspace

PYTEST_CACHE = (
    "mkdir -p .pytest_cache/v/cache; printf '# Created by pytest automatically.\\n*\\n' > .pytest_cache/.gitignore;"
    "echo '[]' > .pytest_cache/v/cache/nodeids; echo '# pytest cache' > .pytest_cache/README.md;"
)


def dispositions(ws: Workspace) -> dict[str, str]:
    return {c.path: c.disposition.value for c in scan(ws.layer)}


def test_a_tool_cache_with_its_own_ignore_file_is_listed_as_ignored_and_not_applied(ws: Workspace) -> None:
    ws.agent(PYTEST_CACHE + "echo new > new.txt")
    ws.stop()
    found = {c.path: c for c in scan(ws.layer)}
    held = [".pytest_cache", ".pytest_cache/.gitignore", ".pytest_cache/README.md", ".pytest_cache/v/cache/nodeids"]
    for path in held:
        assert found[path].disposition == Disposition.IGNORED, path
        assert ".pytest_cache/.gitignore, which the session's tools wrote" in found[path].reason
    assert found["new.txt"].disposition == Disposition.APPLY
    assert apply(ws.layer).applied == ["new.txt"]
    assert not (ws.repo / ".pytest_cache").exists()


def test_include_ignored_applies_them_all_with_their_directory(ws: Workspace) -> None:
    ws.agent(PYTEST_CACHE)
    ws.stop()
    applied = apply(ws.layer, include_ignored=True).applied
    assert ".pytest_cache/v/cache/nodeids" in applied
    assert (ws.repo / ".pytest_cache/v/cache/nodeids").read_text() == "[]\n"


def test_a_new_directory_keeps_what_its_rules_do_not_match(ws: Workspace) -> None:
    ws.agent("mkdir -p pkg/sub; printf '*.pyc\\n' > pkg/.gitignore; echo x > pkg/mod.pyc; echo y > pkg/mod.py")
    ws.stop()
    found = dispositions(ws)
    assert found["pkg/mod.pyc"] == "ignored"
    assert found["pkg"] == found["pkg/mod.py"] == found["pkg/.gitignore"] == "apply"


def test_the_agents_ignore_file_at_the_top_hides_nothing(ws: Workspace) -> None:
    ws.agent("printf '*\\n' > .gitignore; echo new > new.txt; echo edit >> src/app.py; mkdir fresh; echo f > fresh/f")
    ws.stop()
    found = dispositions(ws)
    assert found == {
        ".gitignore": "apply",
        "new.txt": "apply",
        "src/app.py": "apply",
        "fresh": "apply",
        "fresh/f": "apply",
    }


def test_an_ignore_file_in_a_directory_the_checkout_has_hides_nothing(ws: Workspace) -> None:
    ws.agent("printf '*\\n' > docs/.gitignore; echo edit >> docs/a.txt; echo n > docs/n.txt; echo b >> docs/sub/b.txt")
    ws.stop()
    assert set(dispositions(ws).values()) == {"apply"}


def test_a_directory_made_again_after_deleting_it_is_not_new(ws: Workspace) -> None:
    ws.agent("rm -rf docs; mkdir docs; printf '*\\n' > docs/.gitignore; echo fresh > docs/a.txt")
    ws.stop()
    found = dispositions(ws)
    assert found["docs/a.txt"] == found["docs/.gitignore"] == "apply"


def test_a_new_directorys_rules_never_release_what_the_checkout_ignores(ws: Workspace) -> None:
    ws.agent("mkdir fresh; printf '!*.log\\n!x\\n' > fresh/.gitignore; echo l > fresh/app.log; echo x > fresh/x")
    ws.stop()
    found = dispositions(ws)
    assert found["fresh/app.log"] == "ignored" and found["fresh/x"] == "apply"


def test_a_new_directorys_rules_reach_only_below_it(ws: Workspace) -> None:
    ws.agent("mkdir fresh; printf '*\\n../*\\n/*\\n**/*\\n' > fresh/.gitignore; echo n > new.txt; echo e >> README.md")
    ws.stop()
    found = dispositions(ws)
    assert found["new.txt"] == found["README.md"] == "apply"
    assert found["fresh"] == found["fresh/.gitignore"] == "ignored"


def test_an_ignore_file_that_is_a_link_or_a_directory_counts_for_nothing(ws: Workspace) -> None:
    ws.agent("mkdir a b; echo '*' > star; ln -s ../star a/.gitignore; echo x > a/x;mkdir -p b/.gitignore; echo y > b/y")
    ws.stop()
    found = dispositions(ws)
    assert found["a/x"] == found["b/y"] == "apply"


def test_only_small_plain_rules_count() -> None:
    assert tool_rules_text(b"# Created by pytest automatically.\n*\n") == "# Created by pytest automatically.\n*\n"
    assert tool_rules_text(b"*" * 5 + b"\n") is None  # a pattern of many wildcards could make a listing crawl
    assert tool_rules_text(b"\xff*\n") is None
    assert tool_rules_text(b"*\n" + b"#" * MAX_TOOL_IGNORE_BYTES) is None


def test_a_tool_cache_inside_a_directory_the_checkout_has_is_held_back_alone(ws: Workspace) -> None:
    ws.agent(
        "mkdir -p src/.mypy_cache/3.11; echo '*' > src/.mypy_cache/.gitignore; echo {} > src/.mypy_cache/3.11/a.json"
    )
    ws.stop()
    assert dispositions(ws) == {
        "src/.mypy_cache": "ignored",
        "src/.mypy_cache/.gitignore": "ignored",
        "src/.mypy_cache/3.11": "ignored",
        "src/.mypy_cache/3.11/a.json": "ignored",
    }


def test_a_new_directory_holding_only_what_is_held_back_is_held_back_too(ws: Workspace) -> None:
    ws.agent(
        "mkdir -p out/cache; printf '*.tmp\\n.gitignore\\n' > out/.gitignore; echo '*' > out/cache/.gitignore;"
        "echo a > out/cache/a; echo b > out/b.tmp"
    )
    ws.stop()
    assert set(dispositions(ws).values()) == {"ignored"}
