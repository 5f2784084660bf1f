"""One session's copy-on-write workspace: where its pieces live and the overlay that mounts them.

The container's ``/workspace`` is an overlay whose lower layer is the user's checkout and
whose upper layer is a directory the controller owns. The kernel never writes a lower
layer, so whatever the agent does lands in ``upper``; the checkout changes only through
``apply``. Options, and why:

- ``userxattr``: overlay keeps its markers (opaque dirs) in ``user.overlay.*`` xattrs we
  can read without root, and escapes the agent's own ``user.overlay.*`` writes to
  ``user.overlay.overlay.*`` — the agent cannot forge a marker.
- ``redirect_dir=nofollow``: renaming a lower directory copies it instead of leaving a
  redirect xattr, so the upper layer alone says what each path holds.
- ``metacopy=off``: a copied-up file carries its data, never a pointer into the lower.
- ``index=off``: no inode index shared across mounts; the layer is a plain tree.

Layout under ``<data_dir>/workspaces/<session>/`` (mode 0700, so nothing the agent left
in ``upper`` — a setuid binary, say — is reachable by other host users)::

    layer.json      the repository path and owner
    baseline.json   the checkout at session start (see ``baseline``); ignore.json its ignore files, repos.json the
                    repositories nested in it
    expected.json   what this session last wrote or restored, per path (see ``apply``)
    upper/ work/    the overlay's upper and work directories
    lower           a symlink to the checkout, which overlay's lowerdir names instead of the repository's path
    disk.img disk/  with a disk quota: the layer's own ext4 filesystem (an image file, sparse) and where it is
                    mounted; ``upper``, ``work``, ``checkpoints`` and ``applies`` are then inside ``disk/``
                    (see ``controller.workspace.quota``), so the agent's files, checkpoints and apply backups share the quota
    (setup tree)    optional, shared: what the environment's setup wrote (see ``controller.environment.setups``); the
                    overlay's lowerdir is then ``setup:checkout``, so neither is ever written
    checkpoints/    one tree per checkpoint, plus its manifest (see ``checkpoints``)
    applies/        one record and saved originals per apply (see ``apply``)
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from ..errors import LayerInUseError, LayerMissingError, RepoChangedError, WorkspaceError
from . import baseline, beneath, names
from .buildinputs import BuildInputs
from .names import DEFAULT_NAMES
from .records import load, save

OVERLAY_OPTIONS = "userxattr,redirect_dir=nofollow,metacopy=off,index=off"
SEED = ".cubicle-seed"
"""The one file of the seed layer, a lower layer a layer with a disk quota mounts topmost (see ``headroom``)."""
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
# Overlay's option string is split on ',' and lowerdir on ':'; '\' escapes. Refuse rather than escape.
# A space is fine (the engine hands the string to mount(2) as is); control characters are not.
UNSAFE_IN_OPTIONS = re.compile(r"[,:\\=\x00-\x1f\x7f]")


class DiskQuota(BaseModel):
    """The size and the file count of a layer's own filesystem (``controller.workspace.quota`` makes and mounts it)."""

    model_config = ConfigDict(extra="forbid")

    mb: int
    inodes: int


class LayerInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    repo: str  # the checkout (the overlay's lower layer), absolute and already vetted by ``repos.resolve``
    uid: int  # the checkout's owner: applied files belong to them
    gid: int
    dev: int  # the checkout directory's identity when the session began: every mount checks it again
    ino: int
    setup: str | None = None  # the environment's setup tree, a read-only layer between the checkout and ``upper``
    trusted: tuple[str, ...] = ()  # files the environment's definition reads: applied only when forced by name
    disk: DiskQuota | None = None  # the layer's writable parts live on their own filesystem of this size
    mirrored: bool = False  # the checkout's directories have their upper directories (``headroom``)
    names: int = DEFAULT_NAMES  # entries the upper may hold before every walk of it stops (``names``)
    build: BuildInputs = BuildInputs()  # what the environment's next build and setup take from the checkout


class Layer:
    """Paths of one session's layer; everything else is read from the files under ``root``."""

    def __init__(self, root: Path, info: LayerInfo) -> None:
        self.root = root
        self.info = info
        self.repo = Path(info.repo)

    @property
    def fs(self) -> Path:
        """Where the writable parts live: the quota filesystem's mount point, or the layer's own directory."""
        return disk_mount(self.root) if self.info.disk is not None else self.root

    @property
    def upper(self) -> Path:
        return self.fs / "upper"

    @property
    def work(self) -> Path:
        return self.fs / "work"

    @property
    def checkpoints(self) -> Path:
        return self.fs / "checkpoints"

    @property
    def applies(self) -> Path:
        return self.fs / "applies"

    @property
    def baseline_file(self) -> Path:
        return self.root / "baseline.json"

    @property
    def expected_file(self) -> Path:
        return self.root / "expected.json"

    def baseline(self) -> baseline.Baseline:
        return baseline.Baseline.load(self.baseline_file)


def disk_image(root: Path) -> Path:
    """The image file of the quota filesystem of the layer at ``root``."""
    return root / "disk.img"


def disk_mount(root: Path) -> Path:
    return root / "disk"


def seed_dir(root: Path) -> Path:
    """The seed layer of the layer at ``root``: read-only to the overlay, outside the quota (see ``headroom``)."""
    return root / "seed"


def layer_dir(data_dir: Path, session_id: str) -> Path:
    if not SESSION_ID.fullmatch(session_id):
        raise WorkspaceError(f"Not a usable session id for a layer: {session_id!r}.")
    return data_dir / "workspaces" / session_id


def create(
    data_dir: Path,
    session_id: str,
    repo: Path,
    trusted: tuple[str, ...] = (),
    disk: tuple[DiskQuota, Callable[[Layer], None]] | None = None,
    names: int = DEFAULT_NAMES,
    build: BuildInputs | None = None,
    recorder: Callable[[str, str], None] = baseline.record_into,
) -> Layer:
    """Make the layer's directories and record the checkout's baseline (with ``recorder``: in a walk's child, when
    the caller passes one that runs there); the repo must be vetted already.

    ``trusted`` names the files of the environment's definition besides ``.devcontainer/`` and
    ``.cubicle/`` (its Dockerfile, say): a change to one is applied only when forced by name.
    With ``disk`` (a quota, and what makes and mounts the layer's filesystem of that quota at ``layer.fs``), that
    filesystem is made before anything is written there. ``names`` bounds the entries the agent may make
    (``names``); ``build``: what the environment's build and setup take from the checkout (a change to it is held
    back, see ``buildinputs``).
    """
    root = layer_dir(data_dir, session_id)
    st = _checkout_stat(repo)
    root.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    root.mkdir(mode=0o700)
    info = LayerInfo(
        repo=str(repo),
        uid=st.st_uid,
        gid=st.st_gid,
        dev=st.st_dev,
        ino=st.st_ino,
        trusted=trusted,
        disk=disk[0] if disk else None,
        names=names,
        build=build or BuildInputs(),
    )
    layer = Layer(root, info)
    _make_parts(layer, st, disk[1] if disk else None)
    recorder(str(repo), str(layer.baseline_file))
    save(root / "layer.json", info)
    return layer


def _checkout_stat(repo: Path) -> os.stat_result:
    """The checkout directory's own stat (a symlink is not followed); WorkspaceError when it is not a directory."""
    st = os.stat(repo, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        raise WorkspaceError(f"The repository {repo} is not a directory (or is a symlink).")
    return st


def _make_parts(layer: Layer, repo_st: os.stat_result, attach: Callable[[Layer], None] | None) -> None:
    """The layer's writable parts, on its own filesystem when it has a disk quota (made and mounted first)."""
    if layer.info.disk is not None:
        if attach is None:
            raise WorkspaceError("A layer with a disk quota needs something to make its filesystem.")
        layer.fs.mkdir(mode=0o700)
        attach(layer)
    for sub in (layer.work, layer.checkpoints, layer.applies):
        sub.mkdir(mode=0o700)
    _make_upper(layer.upper, repo_st)


def _make_upper(upper: Path, repo_st: os.stat_result) -> None:
    """The upper root's owner and mode become /workspace's, so they copy the checkout's root."""
    upper.mkdir(mode=0o700)
    if os.geteuid() == 0:
        os.chown(upper, repo_st.st_uid, repo_st.st_gid)
    os.chmod(upper, stat.S_IMODE(repo_st.st_mode) & 0o777)


def open_upper(layer: Layer) -> int:
    """An fd on the upper root. The agent may ``chmod 000 /workspace``; the root is the controller's
    own directory (made by ``create``), so a controller that is not root opens it up again to read it."""
    try:
        return beneath.open_root(layer.upper)
    except PermissionError:
        st = os.stat(layer.upper, follow_symlinks=False)
        if os.geteuid() == 0 or st.st_uid != os.geteuid() or not stat.S_ISDIR(st.st_mode):
            raise
        os.chmod(layer.upper, stat.S_IMODE(st.st_mode) | stat.S_IRWXU)
        return beneath.open_root(layer.upper)


def count_names(layer: Layer, limit: int) -> int:
    """``names.count`` of the upper directory: its names, up to one past ``limit``."""
    upper = open_upper(layer)
    try:
        return names.count(upper, limit)
    finally:
        os.close(upper)


def open_layer(data_dir: Path, session_id: str) -> Layer:
    root = layer_dir(data_dir, session_id)
    try:
        return Layer(root, load(root / "layer.json", LayerInfo))
    except FileNotFoundError:
        raise LayerMissingError(f"Session {session_id} has no workspace layer.") from None


def check_repo(layer: Layer) -> None:
    """Refuse to mount a checkout path that now leads somewhere else than when the session began.

    The path was resolved (every symlink followed) at creation; it must still be a real
    directory, reached without a symlink at any level, with the same device and inode. A
    swapped directory (say, replaced by a symlink to ``/``) would otherwise be what the
    engine mounts under the agent.
    """
    repo = layer.repo
    try:
        st = os.stat(repo, follow_symlinks=False)
        real = os.path.realpath(repo, strict=True)
    except OSError as err:
        raise RepoChangedError(f"The repository {repo} is gone ({err.strerror}).") from None
    if real != str(repo) or not stat.S_ISDIR(st.st_mode) or (st.st_dev, st.st_ino) != (layer.info.dev, layer.info.ino):
        raise RepoChangedError(
            f"The repository path {repo} no longer leads to the directory this session began on "
            "(it was moved, replaced or turned into a symlink); the session's sandbox will not start on it."
        )


def open_setup(layer: Layer) -> int | None:
    """An fd on the environment's setup tree beneath the layer, None when it has none."""
    return beneath.open_root(Path(layer.info.setup)) if layer.info.setup else None


def open_repo(layer: Layer) -> int:
    """An fd on the checkout, refused (RepoChangedError) unless it is still the pinned directory.

    The fd's own identity is checked, so a swap after this call cannot redirect what is read
    or written through it (``scan`` reads the checkout, ``apply`` and ``revert`` write it).
    """
    try:
        fd = beneath.open_root(layer.repo)
    except OSError as err:
        raise RepoChangedError(
            f"The repository path {layer.repo} no longer leads to the directory this session began on "
            f"({err.strerror}); nothing was read or written there."
        ) from None
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != (layer.info.dev, layer.info.ino):
        os.close(fd)
        raise RepoChangedError(
            f"The repository path {layer.repo} no longer leads to the directory this session began on "
            "(it was moved or replaced); nothing was read or written there."
        )
    return fd


def mount_options(layer: Layer, seeded: bool = False) -> str:
    """The layer's overlay: ``seeded`` puts the seed layer on top (``headroom.prepare`` says whether it may).

    The checkout is named through ``lower_link``: the options are what a sandbox reads in its
    ``/proc/self/mountinfo``, so they name the layer's folder, never the path of the user's repository."""
    checkout = lower_link(layer)
    lowers = [Path(layer.info.setup), checkout] if layer.info.setup else [checkout]
    if seeded:
        lowers.insert(0, seed_dir(layer.root))
    return overlay_options(lowers, layer.upper, layer.work)


def lower_link(layer: Layer) -> Path:
    """``<layer>/lower``: a symlink to the checkout, made (or made again, atomically) when it leads elsewhere.

    The kernel follows it when the engine mounts the overlay, and keeps the name given. A repository path
    overlay's options could not carry (a ``:`` or ``,`` in it) is no obstacle either."""
    link = layer.root / "lower"
    with contextlib.suppress(OSError):
        if os.readlink(link) == str(layer.repo):
            return link
    made = layer.root / f".lower.{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(made)
    os.symlink(str(layer.repo), made)
    os.replace(made, link)
    return link


def overlay_options(lowers: list[Path], upper: Path, work: Path) -> str:
    """Overlay's option string: ``lowers`` topmost first, each path refused if the string cannot carry it."""
    for path in (*lowers, upper, work):
        if UNSAFE_IN_OPTIONS.search(str(path)):
            raise WorkspaceError(f"The path {str(path)!r} has a character overlay options cannot carry.")
    lowerdir = ":".join(map(str, lowers))
    return f"lowerdir={lowerdir},upperdir={upper},workdir={work},{OVERLAY_OPTIONS}"


def set_setup(layer: Layer, tree: Path | None) -> None:
    """Put the environment's setup tree beneath the layer (before its first container), recorded in ``layer.json``.

    A layer the agent has written keeps the setup it was written over: its copied-up files
    came from that tree, and another would leave them stale.
    """
    wanted = None if tree is None else str(tree)
    if layer.info.setup == wanted:
        return
    ensure_unmounted(layer)  # it may empty the upper layer
    if layer.info.setup is not None:
        if not _known_unwritten(layer):
            raise WorkspaceError(
                f"The workspace of {layer.repo} was written over another environment setup; it keeps that one."
            )
        _empty_upper(layer)  # directories made ahead over the old setup: made again over the new one
    layer.info = layer.info.model_copy(update={"setup": wanted, "mirrored": False})
    save(layer.root / "layer.json", layer.info)


def _empty_upper(layer: Layer) -> None:
    upper = open_upper(layer)
    try:
        with os.scandir(upper) as it:
            names = [e.name for e in it]
        for name in names:
            beneath.remove_tree(upper, name)
    finally:
        os.close(upper)


def _known_unwritten(layer: Layer) -> bool:
    """``_unwritten``; a layer it cannot read counts as written."""
    try:
        return _unwritten(layer)
    except OSError:
        return False  # not known to be unwritten


def _unwritten(layer: Layer) -> bool:
    """Whether the agent wrote nothing in the layer that a setup tree lies beneath: its upper holds only
    directories of the checkout, none opaque, each with the checkout's mode or the setup's (``headroom``
    makes these before the first mount)."""
    upper = open_upper(layer)
    repo = open_repo(layer)
    setup = open_setup(layer)
    try:
        return _unwritten_dir(upper, repo, setup, "")
    finally:
        beneath.close_all(upper, repo, setup)


def _unwritten_dir(upper: int, repo: int, setup: int | None, prefix: str) -> bool:
    if prefix.count("/") >= baseline.MAX_DEPTH:
        return False
    with os.scandir(upper) as it:
        entries = [(e.name, e.stat(follow_symlinks=False)) for e in it]
    for name, st in entries:
        if not prefix and _seed_whiteout(repo, name, st):
            continue  # the seed's whiteout (``headroom``): the toolbox's, not the agent's
        if not _checkout_dir(st, repo, setup, prefix + name):
            return False
        child = beneath.open_dir(upper, name)
        try:
            if _xattr(child, "user.overlay.opaque") is not None:
                return False
            if not _unwritten_dir(child, repo, setup, f"{prefix}{name}/"):
                return False
        finally:
            os.close(child)
    return True


def _seed_whiteout(repo: int, name: str, st: os.stat_result) -> bool:
    """Whether ``name`` at the top of the upper layer is the whiteout of a seed the checkout does not hold."""
    whiteout = name == SEED and stat.S_ISCHR(st.st_mode) and st.st_rdev == 0
    return whiteout and beneath.lstat(repo, SEED) is None


def _dir_mode(root: int | None, path: str) -> int | None:
    """The mode of ``path`` beneath ``root`` if it is a directory there."""
    st = beneath.lstat(root, path) if root is not None else None
    return stat.S_IMODE(st.st_mode) if st is not None and stat.S_ISDIR(st.st_mode) else None


def _checkout_dir(st: os.stat_result, repo: int, setup: int | None, path: str) -> bool:
    """Whether ``st`` is a directory the checkout holds at ``path`` too, with the checkout's mode or the setup's."""
    if not stat.S_ISDIR(st.st_mode):
        return False
    held = _dir_mode(repo, path)
    return held is not None and stat.S_IMODE(st.st_mode) in (held, _dir_mode(setup, path))


def _xattr(fd: int, name: str) -> bytes | None:
    try:
        return os.getxattr(fd, name)
    except OSError:
        return None


def ensure_unmounted(layer: Layer, mountinfo: Path = Path("/proc/self/mountinfo")) -> None:
    """Refuse to rewrite an upper layer an overlay still uses: the kernel calls that undefined.

    The engine mounts the volume in its own mount namespace; this sees it when the controller
    shares it (on the host). A controller in a container must stop the sandbox first anyway.
    """
    needle = f"upperdir={layer.upper}".replace(" ", "\\040").encode()  # mountinfo escapes a space as \040
    with contextlib.suppress(OSError):
        for line in mountinfo.read_bytes().splitlines():
            fields = line.split(b" - ", 1)[-1].split(b" ")
            if fields[0] == b"overlay" and needle in fields[-1].split(b","):
                raise LayerInUseError(f"The workspace layer of {layer.repo} is still mounted.")


def discard(layer: Layer) -> list[str]:
    """Remove the whole layer; returns what could not be removed (empty when all went).

    The kernel leaves ``work/work`` (and whiteouts it keeps there) owned by root with mode
    000, and the agent may leave its own directories at 000. Root opens each up before
    removing it. A controller that is not root removes what it owns; a root-owned
    ``work/work`` that is not empty stays and is reported here — it holds no agent data,
    and ``rm -rf`` by root clears it (``Workspaces`` asks the engine to, see ``sandbox.clear_as_root``).
    """
    return discard_dir(layer.root)


def discard_dir(root: Path) -> list[str]:
    """``discard`` by the layer's directory alone: a layer half removed before has lost its ``layer.json``."""
    if not root.exists():
        return []
    try:
        beneath.remove_path(root)
    except OSError as err:
        return [str(err.filename or root)]
    return []
