"""Environments: what a repository's sessions run in (``definition``) and the image made for it (``image``).

``definition.load`` reads the repository's definition (``.cubicle/environment.toml`` or a
devcontainer.json) from the real checkout; ``build.ensure_image`` returns the tag a sandbox
runs: the sandbox image for the default environment, else an image with the toolbox added,
built once per content hash and reused after.
"""

from __future__ import annotations

from ..wire.envspec import DEFAULT_SETUP_INPUTS, Environment, EnvironmentRequest
from .definition import (
    Overrides,
    definition_hash,
    load,
    override,
    setup_input_files,
    setup_inputs_hash,
    trusted_paths,
)

__all__ = [
    "DEFAULT_SETUP_INPUTS",
    "Environment",
    "EnvironmentRequest",
    "Overrides",
    "definition_hash",
    "load",
    "override",
    "setup_input_files",
    "setup_inputs_hash",
    "trusted_paths",
]
