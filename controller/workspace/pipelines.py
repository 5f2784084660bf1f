"""The repository's CI definitions: what a hosted CI runs, with the repository's secrets, on the next push.

An agent's change there runs nothing on this machine, which is why no other rule catches it, and everything on
the next push: a workflow that posts ``${{ secrets.DEPLOY_KEY }}`` to an outside host runs with the deploy key.
So these paths are ``trusted``, like the environment's definition and git's pointers: listed with the reason,
held back from a plain apply and from the piped diff, applied only when forced by name (``apply --force PATH``).

Judged by name, at the session's folder's top (where the CI services look), in any case (a checkout on a
case-insensitive disk writes ``.GitHub/Workflows`` where ``.github/workflows`` is), with the ancestors on the way
covered when they are not directories (a symlink ``.github`` would lead the CI elsewhere). Beyond them, on
purpose: the scripts a definition calls (``run: ./scripts/deploy.sh``), and a definition at a path a project
configured in its CI service's settings; those are reviewed as ordinary changes.
"""

from __future__ import annotations

from .gitpointers import Index, Pointer

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
)
"""(path in lower case, is a directory, what runs it): the CI definitions a hosted service reads from a push."""

INDEX = Index(tuple(Pointer(path, directory, why) for path, directory, why in DEFINITIONS))


def why(path: str, is_dir: bool) -> str | None:
    """Why ``path`` (relative to the session's folder) is a CI definition, or None when it is not one."""
    found = INDEX.covering(path.lower(), is_dir)
    if found is None:
        return None
    return (
        f"a CI definition ({found.why}): it runs with the repository's secrets on the next push; "
        "applied only when forced by name (apply --force PATH)"
    )
