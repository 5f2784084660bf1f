"""The repository's CI definitions: what a hosted CI runs, with the repository's secrets, on the next push.

An agent's change there runs nothing on this machine, which is why no other rule catches it, and everything on
the next push: a workflow that posts ``${{ secrets.DEPLOY_KEY }}`` to an outside host runs with the deploy key.
So these paths are ``trusted``, like the environment's definition and git's pointers: listed with the reason,
held back from a plain apply and from the piped diff, applied only when forced by name (``apply --force PATH``).

Judged by name, at the session's folder's top (where the CI services look) and at the top of each repository nested
in it (a submodule, a vendored clone: pushed, it runs its own CI), in any case as ``str.casefold`` reads it (a
checkout on a case-insensitive disk writes ``.GitHub/Workflows`` where ``.github/workflows`` is), with the
ancestors on the way covered when they are not directories (a symlink ``.github`` would lead the CI elsewhere).
And judged where the checkout's own symlinks lead (``through``), as git's pointers are: with ``.github -> gh``
committed, ``gh/workflows/new.yml`` is a workflow the CI runs, and with ``.gitlab-ci.yml -> ci/main.yml``,
``ci/main.yml`` is GitLab's definition.
Beyond them, on purpose: the scripts a definition calls (``run: ./scripts/deploy.sh``), and a definition at a path a project
configured in its CI service's settings; those are reviewed as ordinary changes.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Collection, Sequence
from pathlib import Path

from .gitpointers import MAX_NESTED, Index, Pointer, fold, followed

DEFINITIONS: tuple[tuple[str, bool, str], ...] = (
    (".github/workflows", True, "GitHub Actions workflows"),
    (".github/actions", True, "GitHub Actions the workflows use"),
    ("action.yml", False, "the GitHub Action this repository is (uses: ./)"),
    ("action.yaml", False, "the GitHub Action this repository is (uses: ./)"),
    (".github/dependabot.yml", False, "Dependabot, which sends registry secrets where it names"),
    (".github/dependabot.yaml", False, "Dependabot, which sends registry secrets where it names"),
    (".gitea/workflows", True, "Gitea Actions workflows"),
    (".forgejo/workflows", True, "Forgejo Actions workflows"),
    (".gitlab-ci.yml", False, "GitLab CI"),
    (".gitlab-ci.yaml", False, "GitLab CI"),
    (".gitlab", True, "GitLab CI includes and templates"),
    (".circleci", True, "CircleCI"),
    ("jenkinsfile", False, "Jenkins"),
    ("azure-pipelines.yml", False, "Azure Pipelines"),
    ("azure-pipelines.yaml", False, "Azure Pipelines"),
    (".azure-pipelines", True, "Azure Pipelines"),
    (".buildkite", True, "Buildkite"),
    (".drone.yml", False, "Drone"),
    (".drone.yaml", False, "Drone"),
    (".drone.star", False, "Drone"),
    ("bitbucket-pipelines.yml", False, "Bitbucket Pipelines"),
    (".travis.yml", False, "Travis CI"),
    (".woodpecker", True, "Woodpecker CI"),
    (".woodpecker.yml", False, "Woodpecker CI"),
    (".woodpecker.yaml", False, "Woodpecker CI"),
    (".cirrus.yml", False, "Cirrus CI"),
    (".cirrus.star", False, "Cirrus CI"),
    ("appveyor.yml", False, "AppVeyor"),
    (".appveyor.yml", False, "AppVeyor"),
    (".semaphore", True, "Semaphore"),
    ("cloudbuild.yaml", False, "Google Cloud Build"),
    ("cloudbuild.yml", False, "Google Cloud Build"),
    ("buildspec.yml", False, "AWS CodeBuild"),
    ("codemagic.yaml", False, "Codemagic"),
    ("bitrise.yml", False, "Bitrise"),
    (".tekton", True, "Tekton (Pipelines as Code)"),
    (".build.yml", False, "sourcehut builds"),
    (".builds", True, "sourcehut builds"),
    ("buildkite.yml", False, "Buildkite"),
    ("buildkite.yaml", False, "Buildkite"),
    ("buildkite.json", False, "Buildkite"),
    ("cloudbuild.json", False, "Google Cloud Build"),
    (".codecatalyst/workflows", True, "Amazon CodeCatalyst workflows"),
    (".teamcity", True, "TeamCity (versioned settings)"),
    (".harness", True, "Harness pipelines"),
    ("codefresh.yml", False, "Codefresh"),
    ("codefresh.yaml", False, "Codefresh"),
    ("jenkins-x.yml", False, "Jenkins X"),
    (".lighthouse", True, "Jenkins X (Lighthouse triggers)"),
    (".workflow", True, "Gitee Go workflows"),
    (".onedev-buildspec.yml", False, "OneDev"),
    ("renovate.json", False, "Renovate, which runs package managers with registry secrets"),
    ("renovate.json5", False, "Renovate, which runs package managers with registry secrets"),
    (".github/renovate.json", False, "Renovate, which runs package managers with registry secrets"),
    (".github/renovate.json5", False, "Renovate, which runs package managers with registry secrets"),
    (".renovaterc", False, "Renovate, which runs package managers with registry secrets"),
    (".renovaterc.json", False, "Renovate, which runs package managers with registry secrets"),
    (".renovaterc.json5", False, "Renovate, which runs package managers with registry secrets"),
    (".readthedocs.yaml", False, "Read the Docs, whose build runs the commands it names"),
    (".readthedocs.yml", False, "Read the Docs, whose build runs the commands it names"),
    ("amplify.yml", False, "AWS Amplify's build, with the app's secrets"),
    ("amplify.yaml", False, "AWS Amplify's build, with the app's secrets"),
    ("netlify.toml", False, "Netlify's build, with the site's secrets"),
    ("vercel.json", False, "Vercel's build, with the project's secrets"),
    ("render.yaml", False, "Render's blueprint: its build and deploy commands"),
    (".do", True, "DigitalOcean App Platform's app spec"),
    ("heroku.yml", False, "Heroku's build and release commands"),
    (".gitpod.yml", False, "Gitpod, whose tasks run in every workspace and its prebuilds"),
)
"""(path in lower case, is a directory, what runs it): the CI definitions a hosted service reads from a push."""

INDEX = Index(tuple(Pointer(path, directory, why) for path, directory, why in DEFINITIONS))


def through(repo: Path, nested: Sequence[str] = ()) -> Index:
    """The CI definitions as the checkout's own symlinks lead to them (read from the real checkout, blocking): for
    each definition at the top and at the top of each ``nested`` repository that has a symlink on its way, where
    the way ends and the links met. Empty when the checkout has no such link."""
    real = os.path.realpath(repo)
    found: list[Pointer] = []
    for base in ("", *nested[:MAX_NESTED]):
        for path, directory, what in DEFINITIONS:
            full = posixpath.join(real, base, path)
            lead = followed(real, full, directory, f"{what}, reached through the checkout's symlinks")
            found += [p for p in lead if fold(p.path) != fold(posixpath.join(base, path))]
    return Index(tuple(dict.fromkeys(found)))


def why(path: str, is_dir: bool, repositories: Collection[str] = (), linked: Index | None = None) -> str | None:
    """Why ``path`` (relative to the session's folder) is a CI definition, or None when it is not one; at the
    folder's top or at the top of one of the nested ``repositories`` (their paths, folded by ``fold``), or where
    the checkout's symlinks lead one (``linked``: ``through``)."""
    found = _definition(fold(path), is_dir, repositories)
    if found is None and linked is not None:
        found = linked.covering(path, is_dir)
    if found is None:
        return None
    return (
        f"a CI definition ({found.why}): it runs with the repository's secrets on the next push; "
        "applied only when forced by name (apply --force PATH)"
    )


def _definition(folded: str, is_dir: bool, repositories: Collection[str]) -> Pointer | None:
    """The definition ``folded`` is (or lies in, or is on the way to), at the top or in a nested repository."""
    found = INDEX.covering(folded, is_dir)
    at = folded.find("/")
    while found is None and at > 0 and repositories:
        if folded[:at] in repositories:
            found = INDEX.covering(folded[at + 1 :], is_dir)
        at = folded.find("/", at + 1)
    return found
