"""Settings and limits: one pydantic-settings ``Settings``, read once, passed everywhere.

Environment variables use the prefix ``CUBICLE_`` (nested limits with ``__``, e.g.
``CUBICLE_LIMITS__MAX_STEPS=80``). ``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL`` and
``DOCKER_HOST`` are read under their usual names, and ``SSL_CERT_FILE`` /
``REQUESTS_CA_BUNDLE`` as the default of ``ca_bundle``. Nothing else in the package reads
the environment.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from .wire.gitremote import RemotePattern
from .wire.limits import Limits
from .wire.network import MAX_HOSTS, OPEN, HostPattern, NetworkPolicy, Outside, parse_host
from .wire.policies import ContextPolicy

DEFAULT_MODEL = "claude-sonnet-4-5"
DEFAULT_IMAGE = "cubicle-sandbox:latest"
DEFAULT_PROXY_IMAGE = "cubicle-proxy:latest"
DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
DEFAULT_GIT_AUTHOR = "Cubicle <cubicle@localhost>"
DEFAULT_GIT_OWNER = "1000:1000"
MAX_GIT_REMOTES = 256
SYSTEM_CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem")


def machine_ca_bundle() -> Path | None:
    """The CA bundle this machine's own clients use: SSL_CERT_FILE, REQUESTS_CA_BUNDLE, else the system's."""
    for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
        if os.environ.get(name, "").strip():
            return Path(os.environ[name].strip())
    return next((Path(p) for p in SYSTEM_CA_BUNDLES if os.path.isfile(p)), None)


DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def duration_s(text: str) -> float:
    """``90s``, ``30m``, ``12h``, ``7d``, ``2w`` in seconds; ValueError that shows the form otherwise."""
    match = DURATION.fullmatch(text.strip())
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(f"{text!r} is not a duration; use a number and a unit: 90s, 30m, 12h, 7d or 2w.")
    return float(match.group(1)) * UNIT_S[match.group(2)]


class DockerBackendConfig(BaseModel):
    """Sandboxes as containers on one Docker engine (``docker_host``): the backend that runs today."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["docker"] = "docker"


class KubernetesBackendConfig(BaseModel):
    """Sandboxes as Pods in a cluster: designed (docs/kubernetes.md), not yet runnable. Choosing it is refused with
    that said, before anything starts; the design's module is never imported unless asked for."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["kubernetes"]
    namespace: str = Field("cubicle-sandboxes", description="The namespace the sandbox Pods go in.")
    context: str | None = Field(None, description="The kubeconfig context to use; the current one if unset.")


_AUTHOR = re.compile(r"(?P<name>[^<>]*?)\s*<(?P<email>[^<>]*)>")
_REF_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//|/\.|\.lock/")


class GitAuthor(BaseModel):
    """Who the commits Cubicle makes on a session's branch name as author and committer: written ``Name <email>``.
    Either goes into a commit object's header line, so neither may hold a newline, another control character or
    an angle bracket (git's own delimiters)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=128)
    email: str = Field(min_length=3, max_length=254)

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        match = _AUTHOR.fullmatch(value.strip())
        if match is None:
            raise ValueError(f"{value!r} is not written Name <email>, e.g. {DEFAULT_GIT_AUTHOR}")
        return match.groupdict()

    @field_validator("name")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        if not value.strip() or any(c in "<>" or not c.isprintable() for c in value):
            raise ValueError(f"{value!r}: a name of printable characters, without < or >")
        return value

    @field_validator("email")
    @classmethod
    def _plain_email(cls, value: str) -> str:
        local, at, domain = value.partition("@")
        if not (local and at and domain) or any(
            c in "<>@" or c.isspace() or not c.isprintable() for c in local + domain
        ):
            raise ValueError(f"{value!r} is not an email address (user@domain, no spaces or angle brackets)")
        return value

    def __str__(self) -> str:
        return f"{self.name} <{self.email}>"


def branch_prefix(value: str) -> str:
    """``value`` when every branch named with it is a valid git branch (``git check-ref-format``'s rules, with room
    for the name after it); a ValueError saying which rule it breaks otherwise."""
    name = value + "x"
    if not value or len(value) > 100 or value.startswith(("/", "-", ".")):
        raise ValueError(f"{value!r}: a branch prefix is 1 to 100 characters, not starting with /, - or .")
    if _REF_FORBIDDEN.search(name):
        raise ValueError(
            f"{value!r} cannot start a git branch name: no spaces, control characters, ~ ^ : ? * [ \\, '..', '@{{', "
            "'//', and no part starting with . or ending with .lock"
        )
    return value


BackendConfig = Annotated[DockerBackendConfig | KubernetesBackendConfig, Field(discriminator="kind")]
"""Where sessions' sandboxes run, chosen by ``kind`` (``CUBICLE_BACKEND__KIND``)."""


class Settings(BaseSettings):
    """Cubicle's configuration; CLI flags override it, tests build their own."""

    model_config = SettingsConfigDict(
        env_prefix="CUBICLE_", env_nested_delimiter="__", extra="ignore", populate_by_name=True
    )

    api_key: SecretStr | None = Field(
        None, validation_alias=AliasChoices("ANTHROPIC_API_KEY", "CUBICLE_API_KEY"), description="Anthropic API key."
    )
    base_url: str | None = Field(
        None,
        validation_alias=AliasChoices("ANTHROPIC_BASE_URL", "CUBICLE_BASE_URL"),
        description="Anthropic-compatible endpoint.",
    )
    model: str = Field(DEFAULT_MODEL, description="Model id sent to the Messages API.")
    max_tokens: int = Field(8192, ge=1, le=128_000, description="max_tokens of each model reply.")
    system_prompt: str | None = Field(None, description="Replaces the built-in system prompt.")
    model_retries: int = Field(4, ge=0, le=20, description="Retries of 429, 529 and 5xx answers, with backoff.")
    backend: BackendConfig = Field(
        default_factory=DockerBackendConfig,
        description="Where sandboxes run, by kind (CUBICLE_BACKEND__KIND): docker (the default) or kubernetes "
        "(designed, not yet runnable: refused with a note).",
    )
    image: str = Field(DEFAULT_IMAGE, description="The sandbox image.")
    allowed_images: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Images a request may name (--image, the API's environment.image), besides the default image; "
        "without them only environments the repository defines itself. JSON list or comma-separated.",
    )
    allowed_runtimes: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["runc", "runsc"],
        description="OCI runtimes a session may run under (limits.runtime); one the engine lacks is an error that "
        "says how to install it. A request must not pick a weaker runtime the engine happens to have. JSON list or "
        "comma-separated.",
    )
    setup_network: Annotated[NetworkPolicy, NoDecode] = Field(  # a variable holds the text form, not JSON
        default_factory=lambda: NetworkPolicy(level="allow", hosts=package_hosts()),
        description="The setup command's (and an image build's) network when the environment names none, and what "
        "its defaults,allow=HOST adds to: by default only the package registries this machine's pip, apt and npm are "
        "configured with, or pip's and npm's built-in ones when none is named, through the egress proxy.",
    )
    auto_build_image: bool = Field(True, description="Build the sandbox image when a session finds it missing.")
    pull_images: Literal["definitions", "never"] = Field(
        "definitions",
        description="Which missing images the engine pulls: definitions, only the image an environment names (its "
        "environment.toml's or devcontainer's image, or a request's among allowed_images; by digest when given as "
        "name@sha256:..., checked after the pull), with its progress in the session's build output; never, none. "
        "Cubicle's own sandbox and proxy images are built, never pulled.",
    )
    proxy_image: str = Field(DEFAULT_PROXY_IMAGE, description="The egress proxy image of allow policies.")
    egress_network: str = Field(
        "bridge", description="The Docker network through which the egress proxies of allow policies reach out."
    )
    egress_dns: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="DNS servers (addresses, comma-separated) the egress proxies ask instead of the resolver the "
        "engine gives them: every name an allow policy's sandbox reaches is resolved there.",
    )
    instance: str = Field(default_factory=socket.gethostname, description="Names this controller in container labels.")
    limits: Limits = Field(default_factory=Limits, description="Defaults for each session.")
    context: ContextPolicy = Field(
        default_factory=ContextPolicy, description="How the model's view is kept inside its context window."
    )
    max_limits: Limits = Field(
        default_factory=lambda: Limits(
            memory_mb=8192,
            cpus=4,
            pids=4096,
            tmpfs_mb=4096,
            disk_mb=102_400,
            inodes=10_000_000,
            names=10_000_000,
            io_mbps=4096,
            io_iops=100_000,
            network=OPEN,
            command_timeout_s=3600,
            max_steps=500,
            token_budget=20_000_000,
            wall_clock_s=4 * 3600,
        ),
        description="Ceilings that requested limits are clamped to.",
    )
    api_token: SecretStr | None = Field(None, description="Bearer token of the HTTP API.")
    repo_roots: Annotated[list[Path], NoDecode] = Field(
        default_factory=list, description="Directories sessions may use."
    )
    git_remotes: Annotated[tuple[RemotePattern, ...], NoDecode] = Field(
        (),
        max_length=MAX_GIT_REMOTES,
        description="The git remote URLs `cubicle serve` makes sessions on, as patterns: https://git.example.com/team/*, "
        "https://*.example.com/*, http://127.0.0.1:8080/**. Scheme, host and port must match exactly (the scheme's "
        "port when none is written); * in front of the host is one DNS label; in the path * and ? stay inside one "
        "segment and a whole ** segment spans one or more. A host that resolves to a loopback, private or link-local "
        "address is fetched only when a pattern names that host exactly, not through *. Empty: the server takes "
        "paths under its repository roots only. A JSON list, or comma-separated.",
    )
    git_credentials: Path | None = Field(
        None,
        description="The file of credentials for git remotes, in git's credential-store format (one "
        "https://USER:TOKEN@HOST[:PORT][/PATH] a line); read for each request to a remote, never written, and never "
        "put in a URL, an argument or a log. Unset: remotes are fetched without credentials. An absolute path.",
    )
    git_branch_prefix: str = Field(
        "cubicle/",
        description="What the branches Cubicle makes for sessions on git remotes start with, so that none takes the "
        "name of a branch of yours; the rest of the name is the session's.",
    )
    git_author: Annotated[GitAuthor, NoDecode] = Field(
        DEFAULT_GIT_AUTHOR,  # the text form, validated: the reference shows it so
        validate_default=True,
        description="The author and committer of the commits Cubicle makes on a session's branch, written "
        "Name <email>.",
    )
    git_max_bytes: int = Field(
        2 << 30,
        ge=1 << 20,
        le=1 << 40,
        description="Bytes one fetch of a git remote may write to the controller's disk (its objects and the "
        "checkout); a larger repository is refused with its size named.",
    )
    git_owner: Annotated[tuple[int, int], NoDecode] = Field(
        DEFAULT_GIT_OWNER,  # the text form, validated: the reference shows it so
        validate_default=True,
        description="The uid:gid that owns the checkouts the controller makes of git remotes: the sandbox's "
        "commands run as it, as they run as a local checkout's owner. Never root (0), whose repositories are refused.",
    )
    git_allow_builds: bool = Field(
        False,
        description="Whether a session on a git remote may build an image from the repository's own Dockerfile (its "
        "environment definition's or devcontainer's). Off: never for serve and mcp (a URL the CLI's user typed is "
        "theirs to build), since that Dockerfile comes from outside and runs on this host's engine, with the setup "
        "network, while the image builds.",
    )
    git_connect_timeout_s: float = Field(
        30, ge=1, le=600, description="Seconds a git remote has to accept the controller's connection."
    )
    git_timeout_s: float = Field(
        600,
        ge=10,
        le=86400,
        description="Seconds one fetch from a git remote may take in all before it is stopped (nothing it wrote is "
        "kept).",
    )
    git_mirror_idle_s: float = Field(
        14 * 86400,
        ge=3600,
        validation_alias=AliasChoices("CUBICLE_GIT_MIRROR_IDLE", "git_mirror_idle_s"),
        description="How long a git remote's mirror stays in the data dir once no session has used it and no "
        "session's commit is pinned in it (14 days; a duration such as 14d); past it `cubicle gc` removes it, and "
        "the next session on its URL fetches it whole again. A mirror that stays is repacked and pruned by `cubicle "
        "gc`.",
    )
    data_dir: Path = Field(Path.home() / ".local" / "share" / "cubicle", description="SQLite database and state.")
    database_url: SecretStr | None = Field(
        None,
        description="A PostgreSQL database (postgresql://user:password@host/name) that several controllers share, "
        "in place of the SQLite file in the data dir; the workspace layers stay in each controller's data dir.",
    )
    session_events_mb: int = Field(
        128,
        ge=1,
        le=1 << 20,
        description="Stored events per session; past 7/8 of it, tool results are stored without their output, tool "
        "calls without their long arguments and the model's text not as events (each says how much was not kept; "
        "the model's transcript is not affected).",
    )
    retention_s: float | None = Field(
        None,
        validation_alias=AliasChoices("CUBICLE_RETENTION", "retention_s"),
        description="`cubicle serve` removes ended sessions whose last event is older than this (e.g. 30d; hourly, "
        "as `cubicle gc --older-than`; sessions with unapplied changes stay). Unset: sessions are kept.",
    )
    max_concurrent_sessions: int = Field(8, ge=1, le=1000, description="Turns running at once; more get 429.")
    host_pids_budget: int = Field(
        0,
        ge=0,
        le=1 << 22,
        description="Host process ids the sandboxes of all this host's Cubicle controller processes may hold together "
        "(each process's charge in the host's ledger, CUBICLE_HOST_PIDS_LEDGER), each session charged its "
        "containers' engine pids limits (under gVisor 8 times its pids: its own host tasks); 0: half of "
        "kernel.pid_max, read at start. A new turn past it first removes this process's idle sessions' containers, "
        "then gets 429; a session that alone would pass it is refused (422).",
    )
    host_pids_ledger: Path | None = Field(
        None,
        description="The directory every Cubicle controller process of this host keeps its pids charge in, to share "
        "the budget (CUBICLE_HOST_PIDS_BUDGET); unset: /dev/shm/cubicle-pids (made sticky and writable by every "
        "user). Controllers given different directories, or in other containers or hosts on the same engine, do "
        "not see each other's charges.",
    )
    min_free_mb: int = Field(
        100,
        ge=0,
        le=1 << 24,
        description="No new session starts while the data directory's filesystem has less free space (507); 0: no floor.",
    )
    walk_memory_mb: int = Field(
        1024,
        ge=128,
        le=1 << 20,
        description="Memory (data segment) of the child process that reads a session's layer at a turn's end, for "
        "its changes and for the retention sweep: what the agent made is never walked in the controller's own process.",
    )
    walk_timeout_s: float = Field(
        600,
        ge=1,
        le=86400,
        description="Longest a walk of a session's layer may take before its process is stopped (the walk fails "
        "with an error, and nothing is changed).",
    )
    listing_entries: int = Field(
        50_000,
        ge=1,
        le=1_000_000,
        description="Changes one listing (GET /changes, the review, the viewer) carries at most, with 16 MiB of their "
        "paths: what apply would write first. The rest are counted (Cubicle-Unlisted), not sent; apply writes them too.",
    )
    disk_quota: Literal["auto", "host", "helper", "off"] = Field(
        "auto",
        description="How each session's disk quota (limits.disk_mb, limits.inodes) is made: its own loop-mounted "
        "filesystem, mounted by this process (host: root outside a container) or by a privileged helper container "
        "(helper); auto picks; off: no quota.",
    )
    lease_s: float = Field(
        10,
        ge=1,
        le=3600,
        description="A running turn's lease on its session: renewed every third of it by the controller running "
        "it. A controller that finds a lease run out (its holder died, was paused or cut off) takes the session "
        "over as interrupted; the old holder can then write nothing more of it.",
    )
    idle_timeout_s: float = Field(
        600, gt=0, description="A session's container is removed after this long without a turn."
    )
    max_body_bytes: int = Field(1 << 20, ge=1024, description="Largest request body the API accepts.")
    sse_heartbeat_s: float = Field(15, gt=0, description="Seconds between SSE keep-alive comments.")
    sse_interval_ms: float = Field(
        20,
        ge=0,
        le=1000,
        description="An event stream's writes to one client are at least this far apart: what is stored in "
        "between goes out together. An event after a quiet spell goes out at once.",
    )
    ui_session_hours: float = Field(
        12, gt=0, le=24 * 30, description="How long a browser's sign-in (its session cookie) lasts."
    )
    docker_host: str = Field(
        DEFAULT_DOCKER_HOST,
        validation_alias=AliasChoices("DOCKER_HOST", "CUBICLE_DOCKER_HOST"),
        description="The Docker engine every client connects to (unix:// or plain tcp://).",
    )
    ca_bundle: Path | None = Field(
        default_factory=machine_ca_bundle,
        description="CA bundle given to environment builds and images (a TLS-intercepting proxy's CA); empty: none.",
    )
    host: str = Field("127.0.0.1", description="Address `cubicle serve` binds.")
    port: int = Field(8750, ge=1, le=65535, description="Port `cubicle serve` binds.")

    @field_validator("api_key", "base_url", "api_token", "ca_bundle", "database_url", "git_credentials", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        """An empty variable (as compose passes an unset one) means unset."""
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("git_remotes", mode="before")
    @classmethod
    def _split_patterns(cls, value: Any) -> Any:
        """A JSON list or comma-separated patterns; each is read by ``RemotePattern`` (a comma in a pattern needs
        the JSON form)."""
        return cls._split_roots(value)

    @field_validator("git_credentials")
    @classmethod
    def _absolute_credentials(cls, value: Path | None) -> Path | None:
        """An absolute path (``~`` expanded): the file is read by a helper git runs elsewhere than here."""
        if value is None:
            return None
        path = value.expanduser()
        if not path.is_absolute():
            raise ValueError(f"{str(value)!r} is not an absolute path to the credentials file")
        return path

    @field_validator("git_branch_prefix")
    @classmethod
    def _branch_prefix(cls, value: str) -> str:
        return branch_prefix(value)

    @field_validator("git_owner", mode="before")
    @classmethod
    def _uid_gid(cls, value: Any) -> Any:
        """``uid:gid``, both numbers above 0 (root's repositories are refused, and so is running commands as root)."""
        if isinstance(value, str):
            uid, colon, gid = value.strip().partition(":")
            if not (colon and uid.isascii() and uid.isdigit() and gid.isascii() and gid.isdigit()):
                raise ValueError(f"{value!r} is not written uid:gid, e.g. {DEFAULT_GIT_OWNER}")
            return (int(uid), int(gid))
        return value

    @field_validator("git_owner")
    @classmethod
    def _not_root(cls, value: tuple[int, int]) -> tuple[int, int]:
        if not all(0 < n < (1 << 32) - 1 for n in value):
            raise ValueError(f"{value[0]}:{value[1]}: uid and gid are from 1 to 4294967294 (never root's 0)")
        return value

    @field_validator("retention_s", "git_mirror_idle_s", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        """CUBICLE_RETENTION and CUBICLE_GIT_MIRROR_IDLE are written as durations (``30d``); a number is seconds."""
        if isinstance(value, str) and value.strip() and not value.strip().replace(".", "", 1).isdigit():
            return duration_s(value)
        return value

    @field_validator("docker_host", mode="before")
    @classmethod
    def _blank_is_default_engine(cls, value: Any) -> Any:
        """An empty DOCKER_HOST means the local socket, as it does for the docker CLI."""
        return DEFAULT_DOCKER_HOST if isinstance(value, str) and not value.strip() else value

    @property
    def docker_socket(self) -> Path | None:
        """The engine's socket file, which no repository may contain or sit in; None for a tcp:// engine.

        A tcp:// engine has no file on this host that hands it over; the usual socket path stays
        refused anyway, because it lies in a system directory.
        """
        parts = urlsplit(self.docker_host)
        return Path(parts.netloc + parts.path) if parts.scheme == "unix" else None

    @property
    def protected_paths(self) -> list[Path]:
        """What no repository may be, contain or lie in: the engine's socket (if a file) and the data directory."""
        return [path for path in (self.docker_socket, self.data_dir) if path is not None]

    def outside(self) -> Outside:
        """Where the egress proxies reach out (``egress_network``) and whom they ask for names (``egress_dns``)."""
        return Outside(self.egress_network, self.egress_dns)

    @field_validator("egress_dns", mode="before")
    @classmethod
    def _addresses(cls, value: Any) -> Any:
        """Addresses only: a name would need a resolver to find the resolver."""
        listed = cls._split_roots(value)
        return tuple(str(ipaddress.ip_address(str(item).strip())) for item in listed) if listed else ()

    @field_validator("allowed_images", "allowed_runtimes", mode="before")
    @classmethod
    def _split_names(cls, value: Any) -> Any:
        return cls._split_roots(value)

    @field_validator("repo_roots", mode="before")
    @classmethod
    def _split_roots(cls, value: Any) -> Any:
        """Accept a JSON list or a comma-separated string."""
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                try:
                    return json.loads(text)
                except json.JSONDecodeError as err:
                    raise ValueError(
                        f"starts with '[' but is not a JSON list ({err.msg} at character {err.pos + 1})"
                    ) from None
            return [part.strip() for part in text.split(",") if part.strip()]
        return value


PIP_FILES = (
    Path("/etc/pip.conf"),
    Path("/etc/xdg/pip/pip.conf"),
    Path("~/.config/pip/pip.conf"),
    Path("~/.pip/pip.conf"),
)
APT_SOURCES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))
NPM_FILES = (Path("/etc/npmrc"), Path("~/.npmrc"))
_URL = re.compile(r"\bhttps?://[^\s'\"]+")


NPM_DEFAULT_REGISTRY = "https://registry.npmjs.org/"
"""npm's built-in registry: what ``npm install`` fetches from when no configuration names another."""
NPM_REGISTRY_VARIABLES = ("npm_config_registry", "NPM_CONFIG_REGISTRY")


def package_hosts(
    environ: Mapping[str, str] | None = None, root: Path = Path("/"), home: Path | None = None
) -> tuple[HostPattern, ...]:
    """The hosts this machine's package managers fetch from, read from their own configuration: pip's index URLs
    (its variables and config files), apt's sources, npm's registry (its variables and npmrc files); a manager
    configured with none gets its built-in default (pip's asked of pip itself, npm's registry.npmjs.org). A setup
    command may reach these by default. ``environ``, ``root`` and ``home`` say where to read (this machine's)."""
    environ = os.environ if environ is None else environ

    def place(path: Path) -> Path:
        if path.parts[0] == "~":
            return (home or Path.home()).joinpath(*path.parts[1:])
        return root.joinpath(*path.parts[1:])

    urls = [*_pip_urls(environ, place), *_apt_urls(place), *_npm_urls(environ, place)]
    hosts: dict[str, HostPattern] = {}
    for url in urls:
        with contextlib.suppress(ValueError):
            parts = urlsplit(url)
            pattern = parse_host(f"{parts.hostname}:{parts.port or {'https': 443}.get(parts.scheme, 80)}")
            hosts.setdefault(str(pattern), pattern)
    return tuple(hosts.values())[:MAX_HOSTS]


def _pip_urls(environ: Mapping[str, str], place: Callable[[Path], Path]) -> list[str]:
    """pip's index URLs: its variables and config files; with no index URL, pip's own default."""
    urls = _URL.findall(f"{environ.get('PIP_INDEX_URL', '')} {environ.get('PIP_EXTRA_INDEX_URL', '')}")
    from_files = [url for path in PIP_FILES for url in _urls_in(place(path), ("index-url", "index_url"))]
    if "PIP_INDEX_URL" not in environ and not from_files:
        from_files += _pip_default_index()
    return urls + from_files


def _apt_urls(place: Callable[[Path], Path]) -> list[str]:
    urls: list[str] = []
    for source in map(place, APT_SOURCES):
        # A source is a file or a directory of them: a directory's glob finds its files (and reading it finds
        # nothing), a file's finds nothing.
        for path in [source, *sorted(source.glob("*.list")), *sorted(source.glob("*.sources"))]:
            urls += _urls_in(path, ("deb", "uris"))
    return urls


def _npm_urls(environ: Mapping[str, str], place: Callable[[Path], Path]) -> list[str]:
    """npm's registry: its variable, else its npmrc files' ``registry``, else the built-in default."""
    urls = _URL.findall(" ".join(environ.get(name, "") for name in NPM_REGISTRY_VARIABLES))
    named = urls or [url for path in NPM_FILES for url in _urls_in(place(path), ("registry",))]
    return named or [NPM_DEFAULT_REGISTRY]


def _urls_in(path: Path, keys: tuple[str, ...]) -> list[str]:
    """http(s) URLs on the lines of ``path`` that start with one of ``keys`` (not commented out)."""
    try:
        text = path.expanduser().read_text(errors="replace")
    except OSError:
        return []
    found: list[str] = []
    for line in text.splitlines():
        stripped = line.strip().lower()
        if stripped.startswith(keys):
            found += _URL.findall(line)
    return found


def _pip_default_index() -> list[str]:
    """pip's own default index and file host, from the pip installed here (none if it is not)."""
    try:
        from pip._internal.models.index import PyPI  # type: ignore[import-not-found,unused-ignore]
    except Exception:  # noqa: BLE001 - no pip, or a pip that moved it: no default to allow
        return []
    return [PyPI.url, f"https://{PyPI.file_storage_domain}/"]
