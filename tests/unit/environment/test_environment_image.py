"""What an environment build sends to the engine, without an engine: the rewritten Dockerfile, the toolbox layer,
the packed context, the error a failed build reads as, and the key."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from controller.environment import build as image
from controller.environment import buildcontext, dockerfile
from controller.environment.cachekeys import image_key
from controller.environment.definition import load, materials
from controller.errors import ConfigError

CA = ["COPY --from=cubicle-ca:x /ca-certificates.crt /ca", "ENV SSL_CERT_FILE=/ca"]


def test_ca_lines_follow_every_from_including_continued_ones() -> None:
    text = """# syntax=docker/dockerfile:1
ARG BASE=debian
FROM ${BASE} AS build
RUN make
from \\
  # a comment inside the instruction
  build \\

  AS final
COPY --from=build /out /out
"""
    out = dockerfile.after_each_from(text, CA).splitlines()
    first = out.index("FROM ${BASE} AS build")
    assert out[first + 1 : first + 3] == CA
    last = out.index("  AS final")
    assert out[last + 1 : last + 3] == CA
    assert (
        out.count(CA[0]) == 2 and out[0] == "# syntax=docker/dockerfile:1" and out[-1].startswith("COPY --from=build")
    )


def test_the_escape_directive_changes_what_continues_a_line() -> None:
    text = "# escape=`\nFROM windows `\n  AS base\nRUN dir c:\\\nRUN echo\n"
    out = dockerfile.after_each_from(text, CA).splitlines()
    assert out[3:5] == CA and out[5] == "RUN dir c:\\"


def test_a_from_continued_to_the_end_of_the_file_still_gets_the_lines() -> None:
    assert dockerfile.after_each_from("FROM x \\\n", CA).splitlines()[-2:] == CA


def test_the_toolbox_layer() -> None:
    text = dockerfile.toolbox_layer("sha256:abc", "cubicle-sandbox:latest", "cubicle-ca:1", {"k": 'a"b\\c\nd'})
    lines = text.splitlines()
    assert lines[0] == "FROM sha256:abc" and lines[1] == "USER 0"
    assert f"COPY --from=cubicle-sandbox:latest /usr/bin/tini-static {dockerfile.TINI}" in lines
    assert lines[-3] == f'ENTRYPOINT ["{dockerfile.TINI}", "--"]'
    assert lines[-2] == f'CMD ["{dockerfile.PYTHON}", "-I", "-S", "-u", "/opt/cubicle/toolbox"]'
    assert lines[-1] == 'LABEL "k"="a\\"b\\\\c?d"'
    run = next(line for line in lines if line.startswith("RUN "))
    assert json.loads(run[4:])[:2] == ["/bin/sh", "-c"]
    assert "ENV HOME=/home/agent USER=agent PYTHONDONTWRITEBYTECODE=1" in text
    compile(dockerfile.PREPARE_SOURCE, "prepare.py", "exec")


def test_the_usual_clients_are_pointed_at_the_ca() -> None:
    env_line = dockerfile.ca_lines("cubicle-ca:1")[1]
    for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE"):
        assert f"{name}={dockerfile.CA_PATH}" in env_line


def test_a_packed_context_matches_its_hash_and_carries_the_generated_files(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "app.py").write_text("print(1)\n")
    (repo / "run.sh").write_text("#!/bin/sh\n")
    (repo / "run.sh").chmod(0o755)
    (repo / "link").symlink_to("src/app.py")
    (repo / ".dockerignore").write_text("*.tmp\n")
    (repo / "x.tmp").write_text("left out\n")
    (repo / "Dockerfile").write_text("FROM x\n")
    (repo / ".cubicle").mkdir()
    (repo / ".cubicle" / "environment.toml").write_text('dockerfile = "Dockerfile"\n')
    found = materials(load(repo), repo)
    assert found.context is not None
    data = io.BytesIO()
    archive = buildcontext.open_archive(data)
    packed = buildcontext.pack(found.context, archive, replace={".dockerignore": b"*.tmp\nDF\n", "DF": b"FROM y\n"})
    archive.close()
    assert packed == found.context_digest
    data.seek(0)
    with tarfile.open(fileobj=data) as read:
        members = {m.name: m for m in read.getmembers()}
        assert set(members) == {"src", "src/app.py", "run.sh", "link", ".dockerignore", "Dockerfile", "DF", ".cubicle"}
        assert members["run.sh"].mode == 0o755 and members["link"].issym() and members["link"].linkname == "src/app.py"
        assert all(m.uid == 0 and m.gid == 0 for m in members.values())
        assert read.extractfile("DF").read() == b"FROM y\n"  # type: ignore[union-attr]
        assert read.extractfile(".dockerignore").read() == b"*.tmp\nDF\n"  # type: ignore[union-attr]


def test_the_error_names_the_toolbox_check_line_first() -> None:
    tail = ["Step 8/13 : RUN", "cubicle: the image has no python3 (3.10 or later) on its PATH (/usr/bin)."]
    err = image._failed("the toolbox layer", "The command '/bin/sh -c set -e ...' returned a non-zero code: 1", tail)
    assert str(err).startswith("The environment image cannot run Cubicle's toolbox: the image has no python3")
    assert "  Step 8/13 : RUN" in str(err) and "cubicle env build" in str(err)
    shell = image._failed("the toolbox layer", 'exec: "/bin/sh": stat /bin/sh: no such file or directory', [])
    assert "has no /bin/sh" in str(shell)
    plain = image._failed("Dockerfile", "returned a non-zero code: 2", ["a", "b"])
    assert str(plain).startswith(
        "Building Dockerfile failed: returned a non-zero code: 2\nLast lines of the build:\n  a"
    )


def test_the_ca_bundle_is_read_once_while_unchanged(tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    first = image._ca(bundle)
    assert first is not None and image._ca(bundle) is first
    bundle.write_text("-----BEGIN CERTIFICATE-----\nother\n")
    second = image._ca(bundle)
    assert second is not None and second.digest != first.digest
    assert image._ca(None) is None
    with pytest.raises(ConfigError, match="cannot be read"):
        image._ca(tmp_path / "missing.pem")


def test_the_key_covers_the_toolbox_the_ca_the_base_and_the_checkout(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".cubicle").mkdir()
    (repo / ".cubicle" / "environment.toml").write_text('image = "x"\n')
    found = materials(load(repo), repo)
    layer = image.layer_digest()
    key = image_key(found.build_hash, layer, "d1", "sha256:1", "/r")
    assert key == image_key(found.build_hash, layer, "d1", "sha256:1", "/r")
    assert (
        len(
            {
                key,
                image_key(found.build_hash, layer, "d2", "sha256:1", "/r"),
                image_key(found.build_hash, layer, "d1", "sha256:2", "/r"),
                image_key(found.build_hash, layer, "d1", "sha256:1", "/other"),
                image_key(found.build_hash, layer, "", "sha256:1", "/r"),
                image_key(found.build_hash, layer, "d1", "sha256:1", "https://git.example.com/r.git"),
            }
        )
        == 6
    )
    assert len(image.layer_digest()) == 64
