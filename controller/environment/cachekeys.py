"""What an environment's two caches are keyed by: its setup trees (``setups``) and its images (``build``).

Both keys join what the cache entry is made of, by content, with *where the session's files come from*:

- a **local checkout**: its real path (and, for a setup, the directory's device and inode). The checkout is
  the one the user edits in place, so a file the setup reads beyond the hashed ones still belongs to that
  checkout, and ``cubicle gc`` keeps the newest image of each;
- a **remote repository**: its URL as the session's record holds it (normalised, never with credentials),
  and for a setup the uid and gid its files belong to. Every commit of the URL has a tree of its own
  (``<data dir>/git/trees/<commit>``), so a key holding the tree's path would miss on each new commit; the
  URL stands for the repository the way the path stands for a checkout, and a new commit is to it what an
  edit in place is to a checkout. A second commit whose definition inputs are byte for byte the same reuses
  the setup tree and the image; a change to any of them misses.

What a key is made of, apart from where the files come from, is the same for both: for a setup, the image's id,
the command, its variables and network, and the hash of the files it reads (``definition.setup_inputs_hash``:
the ``setup_inputs`` globs and the command's program when it is a file of the repository); for an image, the
build's hash (``definition.materials``: the image or Dockerfile, its arguments and target, every file of its
context), the toolbox layer's digest, the CA bundle and the base image's id. A URL and a path never spell the
same text (a real path starts with ``/``, a URL with ``http``), and the setup key names which one it holds, so a
remote's entry is never a checkout's, and two URLs never share one.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..workspace import Layer

SetupOrigin = dict[str, str | int]
"""Where a setup's files come from, as its key holds it (``setup_origin``)."""


def setup_origin(layer: Layer, url: str | None, own_tree: bool = False) -> SetupOrigin:
    """Where the session's files come from, for a setup's key: the checkout (its path, device and inode: the keys
    of setups made before remotes existed stay the same), or the remote's ``url`` and the owner of its trees.

    ``own_tree`` adds the remote's tree itself: a key of that one commit, for when the URL's tree was made on a
    commit it does not fit (``setups.shadowing``)."""
    info = layer.info
    if url is None:
        return {"repo": info.repo, "dev": info.dev, "ino": info.ino}
    origin: SetupOrigin = {"url": url, "uid": info.uid, "gid": info.gid}
    if own_tree:
        origin["tree"] = info.repo
    return origin


def setup_key(image_id: str, command: str, env: dict[str, str], network: str, origin: SetupOrigin, inputs: str) -> str:
    """Everything that decides what a setup makes: the image, the command, its variables and network, where the
    files come from (``setup_origin``) and the hash of the files it reads (``definition.setup_inputs_hash``)."""
    key = {"image": image_id, "command": command, "env": env, "network": network, **origin, "inputs": inputs}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]


def image_scope(root: Path, url: str | None) -> str:
    """What an environment image is kept per, in its key and its label (``cubicle gc`` keeps the newest of each):
    the checkout's real path, or the remote's URL."""
    return url if url is not None else str(root).encode("utf-8", "replace").decode()


def image_key(build_hash: str, layer_digest: str, ca_digest: str, base_id: str, scope: str) -> str:
    """An environment image's key: what it is built from (``build_hash``, the toolbox layer, the CA bundle, the
    base image) and what it is kept per (``image_scope``). A second checkout of the same files gets an image of
    its own (built from the engine's layer cache in seconds), so each checkout's images are collected apart."""
    hasher = hashlib.sha256(b"cubicle-env-image-v1\0")
    for part in (build_hash, layer_digest, ca_digest, base_id, scope):
        hasher.update(part.encode() + b"\0")
    return hasher.hexdigest()
