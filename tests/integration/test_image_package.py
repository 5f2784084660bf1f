"""An installed wheel carries everything `cubicle image build` needs: no source checkout required.

The wheel is built from a copy of the checkout and installed into a fresh virtualenv, which sees
this environment's dependencies (a path line in a .pth file, so none of this environment's own
.pth files, the editable install's among them, runs there) but no ``controller`` but the wheel's."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

from docker.errors import ImageNotFound

ROOT = Path(__file__).resolve().parents[2]
TAG = "cubicle-sandbox:wheel-test"
PROXY_TAG = "cubicle-proxy:wheel-test"
RUN_AS_MAIN = (
    "import runpy, controller.sandbox.images as images; print('CONTROLLER', images.__file__, flush=True); "
    "runpy.run_module('controller', run_name='__main__', alter_sys=True)"
)


def _source_copy(dest: Path) -> None:
    """The package's sources, copied so the wheel build writes nothing into the shared checkout."""
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "Dockerfile.sandbox"):
        shutil.copy2(ROOT / name, dest / name)
    for name in ("controller", "sandbox-image"):
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))


def test_wheel_install_builds_the_sandbox_and_proxy_images(tmp_path: Path, docker_client: Any) -> None:
    source, wheels, venv, elsewhere = (tmp_path / name for name in ("src", "wheels", "venv", "elsewhere"))
    source.mkdir()
    elsewhere.mkdir()
    _source_copy(source)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    subprocess.run([*pip, "wheel", "--no-deps", "--wheel-dir", str(wheels), str(source)], check=True)
    (wheel,) = wheels.glob("cubicle-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    target = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True)
    (target / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    packaged = target / "controller" / "sandbox_image"  # the top-level sandbox-image/ and Dockerfile.sandbox
    assert (packaged / "Dockerfile").read_bytes() == (ROOT / "Dockerfile.sandbox").read_bytes()
    assert sorted(p.name for p in (packaged / "toolbox").glob("*.py")) == sorted(
        p.name for p in (ROOT / "sandbox-image" / "toolbox").glob("*.py")
    )
    assert (target / "controller" / "proxy_image" / "errors" / "ERR_CUBICLE_NOT_ALLOWED").is_file()

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    try:
        built = subprocess.run(
            [python, "-c", RUN_AS_MAIN, "image", "build", "--tag", TAG, "--proxy-tag", PROXY_TAG],
            cwd=elsewhere,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert built.returncode == 0, built.stdout + built.stderr
        used = Path(built.stdout.split("CONTROLLER ", 1)[1].split()[0])
        assert used.is_relative_to(target), f"the build used {used}, not the installed wheel"
        assert f"built {TAG}" in " ".join(built.stderr.split())
        assert docker_client.images.get(TAG).labels["org.cubicle.role"] == "sandbox-image"
        assert docker_client.images.get(PROXY_TAG).labels["org.cubicle.role"] == "proxy-image"
    finally:
        for tag in (TAG, PROXY_TAG):
            with contextlib.suppress(ImageNotFound):
                docker_client.images.remove(tag)
