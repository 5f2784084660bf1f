"""The one build step pyproject.toml cannot say: the sandbox image's sources go into the wheel.

``sandbox-image/`` (the toolbox, its profile and statx shim) and ``Dockerfile.sandbox`` live at
the top of the repository, their one source. A wheel carries them as the package data
``controller/sandbox_image/`` (the Dockerfile as ``Dockerfile`` there), so ``pip install`` and
then ``cubicle image build`` work without a checkout. An editable install copies nothing: it
builds from the checkout's own files (``controller.sandbox.images``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        target = Path(self.build_lib) / "controller" / "sandbox_image"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(ROOT / "sandbox-image", target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        shutil.copy2(ROOT / "Dockerfile.sandbox", target / "Dockerfile")


setup(cmdclass={"build_py": BuildPy})
