"""Environment rows: a session on a repository's own (cached) environment image, against its baselines.

The environment is the sandbox image named as the repository's base image
(``.cubicle/environment.toml``: ``image = ...``), so the toolbox layer is built once (seconds)
before timing; every timed start is a cache hit. Each round starts one of each, interleaved:

* a session on the environment: resolving the definition, hashing it and finding its tag
  (``ensure_image``), then starting the sandbox until the toolbox answers;
* a plain session: finding the sandbox image (``images.ensure``), then the same start;
* a bare ``docker run`` of the environment image (``true``, to its exit).

And the sandbox image's size beside its Debian base's: every CI run builds it, and every machine keeps it.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from pathlib import Path
from typing import Any

from docker.errors import APIError, ImageNotFound

from bench.measure import Report, Row, Sample, ms, repetitions
from bench.rows import READY_TARGET, bare_run, give_away, make_repo, sandbox
from controller.config import Settings
from controller.environment import load
from controller.environment.build import ImageOptions, ensure_image
from controller.sandbox import images

HIT_BUDGET_S = 0.100
"""A cache hit may cost at most this much over a plain session's start."""
IMAGE_GROWTH_MB = 250
"""What the sandbox image may add to its base: the tools, Python's venv and pip, the toolbox (about 215 MB)."""


def image_size(report: Report, client: Any, image: str) -> None:
    """The sandbox image's size, and what it adds to the base its Dockerfile names (when that is on the engine)."""
    named = re.search(r"^ARG BASE=(\S+)", images.SANDBOX.dockerfile.read_text(), re.MULTILINE)
    base = named[1] if named else "?"
    ours = client.images.get(image).attrs["Size"] / 1e6
    try:
        added = ours - client.images.get(base).attrs["Size"] / 1e6
    except ImageNotFound:  # built from another base (--base): no baseline here
        added = None
    met = (
        None
        if added is None
        else report.check(
            added <= IMAGE_GROWTH_MB, f"the sandbox image adds {added:.1f} MB to {base} (target ≤ {IMAGE_GROWTH_MB} MB)"
        )
    )
    cells = [image, f"{ours:.1f} MB", base, "?" if added is None else f"{added:.1f} MB", f"≤ {IMAGE_GROWTH_MB} MB"]
    verdict = {None: "", True: "yes", False: "**no**"}[met]
    report.extra.append(
        ("Sandbox image size", ["image", "size", "base", "added to the base", "target", "met"], [[*cells, verdict]])
    )


async def table(report: Report, client: Any, image: str, root: Path, quick: bool) -> None:
    await asyncio.to_thread(image_size, report, client, image)
    repo = make_repo(root, "environment")
    (repo / ".cubicle").mkdir()
    (repo / ".cubicle" / "environment.toml").write_text(f'image = "{image}"\n')
    give_away(repo)
    ca_bundle = Settings().ca_bundle

    def resolve() -> str:
        return ensure_image(client, load(repo), repo, ImageOptions(sandbox_image=image, ca_bundle=ca_bundle)).tag

    tag = await asyncio.to_thread(resolve)  # the one build, untimed
    try:
        await _rounds(report, client, image, repo, tag, resolve, repetitions(6 if quick else 10))
    finally:
        with contextlib.suppress(APIError):  # its checkout is a temporary directory
            client.images.remove(tag)


async def _rounds(report: Report, client: Any, image: str, repo: Path, tag: str, resolve: Any, n: int) -> None:
    env_ready: list[float] = []
    plain_ready: list[float] = []
    bare: list[float] = []

    for _ in range(n):
        start = time.perf_counter()
        env_tag = await asyncio.to_thread(resolve)
        box = sandbox(client, env_tag, repo)
        await box.start()
        env_ready.append(time.perf_counter() - start)
        await box.stop()

        start = time.perf_counter()
        await asyncio.to_thread(images.ensure, client, image, False)
        box = sandbox(client, image, repo)
        await box.start()
        plain_ready.append(time.perf_counter() - start)
        await box.stop()

        start = time.perf_counter()
        container = await asyncio.to_thread(bare_run, client, tag)
        bare.append(time.perf_counter() - start)
        await asyncio.to_thread(container.remove, force=True)
    ours, plain, base = Sample(env_ready), Sample(plain_ready), Sample(bare)
    met = report.check(
        ours.p50 <= READY_TARGET * base.p50,
        f"session ready on a cached environment image {ms(ours.p50)} > {READY_TARGET} × bare docker run {ms(base.p50)}",
    )
    report.rows.append(
        Row(
            "session ready with a cached environment image",
            ours,
            "docker run env-image true",
            base,
            f"≤ {READY_TARGET}×",
            met,
        )
    )
    extra = ours.p50 - plain.p50
    met = report.check(
        extra <= HIT_BUDGET_S,
        f"an environment cache hit costs {ms(extra)} over a plain session (budget {ms(HIT_BUDGET_S)})",
    )
    report.rows.append(
        Row(
            f"environment cache hit: session ready (p50 {'+' if extra >= 0 else '−'}{ms(abs(extra))} over plain)",
            ours,
            "plain session ready (sandbox image)",
            plain,
            f"≤ +{ms(HIT_BUDGET_S)}",
            met,
        )
    )
