"""How an image reference is split for the engine's pull, which registry it names, and which progress is relayed."""

from __future__ import annotations

import pytest

from controller.environment.pull import DEFAULT_REGISTRY, _error, _Relay, parse


@pytest.mark.parametrize(
    ("text", "repository", "tag", "digest", "registry"),
    [
        ("debian", "debian", "latest", "", DEFAULT_REGISTRY),
        ("debian:bookworm-slim", "debian", "bookworm-slim", "", DEFAULT_REGISTRY),
        ("library/debian:12", "library/debian", "12", "", DEFAULT_REGISTRY),
        ("127.0.0.1:5000/team/app", "127.0.0.1:5000/team/app", "latest", "", "127.0.0.1:5000"),
        ("127.0.0.1:5000/app:v1", "127.0.0.1:5000/app", "v1", "", "127.0.0.1:5000"),
        ("localhost/app:v1", "localhost/app", "v1", "", "localhost"),
        (
            "mcr.microsoft.com/devcontainers/python:3.12",
            "mcr.microsoft.com/devcontainers/python",
            "3.12",
            "",
            "mcr.microsoft.com",
        ),
        ("ghcr.io/o/app@sha256:" + "a" * 64, "ghcr.io/o/app", "", "sha256:" + "a" * 64, "ghcr.io"),
        # A digest wins over a tag, as `docker pull` does: the tag is not asked for.
        ("ghcr.io/o/app:v1@sha256:" + "b" * 64, "ghcr.io/o/app", "", "sha256:" + "b" * 64, "ghcr.io"),
    ],
)
def test_a_reference_is_split_into_repository_tag_or_digest_and_registry(
    text: str, repository: str, tag: str, digest: str, registry: str
) -> None:
    ref = parse(text)
    assert (ref.repository, ref.tag, ref.digest, ref.registry) == (repository, tag, digest, registry)
    assert ref.pinned == (f"{repository}@{digest}" if digest else f"{repository}:{tag}")


def test_progress_is_relayed_once_per_change_and_the_first_error_is_kept() -> None:
    said: list[str] = []
    relay = _Relay(said.append)
    for chunk in [
        {"status": "Pulling from app", "id": "v1"},
        {"status": "Pulling fs layer", "id": "abc"},
        {"status": "Waiting", "id": "abc"},
        {"status": "Waiting", "id": "abc"},
        {"status": "Downloading", "id": "abc", "progress": "[=>   ] 1B/9B"},
        {"status": "Downloading", "id": "abc", "progress": "[==>  ] 2B/9B"},  # within the second: not relayed
        {"status": "Download complete", "id": "abc"},
        {"status": "line\x1b[2J\rend"},
        {"error": "first"},
        {"error": "second"},
    ]:
        relay.take(chunk)
    assert said == [
        "v1: Pulling from app",
        "abc: Pulling fs layer",
        "abc: Waiting",
        "abc: Downloading [=>   ] 1B/9B",
        "abc: Download complete",
        "line?[2J?end",  # what comes from outside is printable
    ]
    assert relay.failure == "first"


@pytest.mark.parametrize(
    ("failure", "advice"),
    [
        ("unauthorized: authentication required", "docker login ghcr.io"),
        ("manifest unknown", "Check the image's name, tag and digest as ghcr.io lists them"),
        ("dial tcp: connection refused", "Check that ghcr.io is reachable from the Docker engine"),
    ],
)
def test_a_failed_pull_names_the_image_the_registry_and_what_to_do(failure: str, advice: str) -> None:
    error = _error(parse("ghcr.io/o/app:v1"), failure)
    assert str(error).startswith(f"Pulling the image 'ghcr.io/o/app:v1' from ghcr.io failed: {failure}.")
    assert advice in str(error)
