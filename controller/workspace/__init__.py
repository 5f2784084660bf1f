"""The copy-on-write workspace: the agent writes an overlay layer; the checkout changes only through ``apply``.

Modules, each one concern::

    layer        per-session directories, the overlay's mount options, discard
    baseline     the checkout at session start (cheap identity per entry, ignore files)
    contents     what each file of the checkout held at the start, by content (a conflict is a real change)
    ignore       the repository's ignore rules, matched in-process (pathspec on RE2: linear time, whatever a line)
    dockerignore a build context's .dockerignore by Docker's own rules, matched on RE2
    changes      the upper layer read against the checkout: added / modified / deleted
    gitlike      refusing agent entries that would make a directory look like a git repository
    gitpointers  the work-tree paths the checkout's own git configuration points at
    shellwords   reading shell command lines by their words, for what they run
    buildinputs  the files an environment's next build or setup runs, as changes are judged against them
    pipelines    the CI definitions a hosted CI runs with the repository's secrets (held back as trusted)
    textdiff     bounded in-process unified diffs
    gitpatch     the changes a plain apply writes as one binary-safe patch for git apply (git's extended format)
    checkout     the only writer of the real checkout (no symlink followed, new inodes)
    apply        preflight, all-or-nothing apply, retiring applied paths from the layer
    selection    which change a name (real or printed) or an id means: one, or a refusal naming the candidates
    journal      apply records and per-path expectations, on disk
    revert       undo the newest apply
    checkpoints  per-turn copies of the upper layer, and rewind
    names        counting a layer's entries against the session's limit; bounded directory listings
    headroom     what a deletion needs at the quota, made before the agent can use the last inode
    beneath      opening paths under a directory fd without following symlinks
    records      atomic JSON, the Identity model, a name's one printed form (``shown``) and back (``unshown``)
    offload      walks of a layer in a child process with a memory ceiling of its own
    quota        each session's layer on a filesystem of its own (disk and inode quotas)
    repos        which repositories a session may use
    gitrun       running git on the controller's own repositories: an environment built, only http(s), redacted
    gitcreds     the credential helper: answers get from a file in git's store format, never writes it
    gitmirror    a bare mirror per remote URL (flocked, bounded, address pinned), refs resolved, sessions' pins
    gittree      a commit's files as stored (no filter, hook or submodule) in a shared tree with a .git of its own
    gitpush      a session's changes as one commit on its base (the patch's selection), pushed as a new branch
    gitsweep     what `cubicle gc` removes from the git directory: unused trees and mirrors, leftovers; compaction
    manager      the layers of one data directory: pinned, reviewed, applied, rewound, discarded

Typical life of a session::

    layer = create(data_dir, session_id, repo)          # records the baseline
    mount_options(layer)                                # what the sandbox's backend mounts at /workspace
    ... turn ...; checkpoint(layer)                       # after each turn
    scan(layer)                                           # review
    apply(layer) / revert(layer) / rewind(layer, n)       # sandbox stopped
    discard(layer)
"""

from ..errors import (
    ApplyTooLargeError,
    LayerInUseError,
    LayerMissingError,
    RepoChangedError,
    TooManyEntriesError,
    UnsafePathError,
    WorkspaceError,
)
from ..wire.changeset import ApplyResult, Change, Changes, Conflict, Disposition, Kind, RevertResult
from .apply import ApplyBounds, apply
from .changes import listed, scan
from .checkpoints import checkpoint, rewind
from .layer import Layer, check_repo, create, discard, mount_options, open_layer, set_setup
from .names import DEFAULT_NAMES
from .revert import revert

__all__ = [
    "DEFAULT_NAMES",
    "ApplyBounds",
    "ApplyResult",
    "ApplyTooLargeError",
    "Change",
    "Changes",
    "Conflict",
    "Disposition",
    "Kind",
    "Layer",
    "LayerInUseError",
    "LayerMissingError",
    "RepoChangedError",
    "RevertResult",
    "TooManyEntriesError",
    "UnsafePathError",
    "WorkspaceError",
    "apply",
    "check_repo",
    "checkpoint",
    "create",
    "discard",
    "listed",
    "mount_options",
    "open_layer",
    "revert",
    "rewind",
    "scan",
    "set_setup",
]
