"""The Dockerfile text Cubicle writes: the CA lines put into a repository's Dockerfile, and the toolbox layer.

Certificates: a build behind a TLS-intercepting proxy needs the proxy's CA, or every
``pip install`` in it fails. The host's bundle is made into a one-file image
(``cubicle-ca:<digest>``), and after each ``FROM`` of the repository's Dockerfile Cubicle
inserts a ``COPY --from`` of it to ``CA_PATH`` and ``ENV`` lines that point the usual
clients at it. Nothing is added to the build context, so ``COPY . /app`` copies exactly the
repository's files. The toolbox layer gets the same lines, so the setup and the agent's
commands reach package indexes the same way.

The toolbox layer is ``FROM`` the environment's base (by image id, so nothing in it comes
from the repository's text) and adds: tini (execute-only, from the sandbox image), the
toolbox sources (root-owned) and their bytecode, compiled by the image's Python, a check
that ``python3`` ≥ 3.10 and ``bash`` exist and that this Python can import the toolbox, a
fixed link to that Python, ``/workspace`` and ``/home/agent``, and the sandbox image's ENV,
ENTRYPOINT and CMD.
"""

from __future__ import annotations

import json
import re

from ..sandbox.isolation import READABLE_TINI, STATX_SHIM

CA_PATH = "/usr/local/share/cubicle/ca-certificates.crt"
CA_VARIABLES = (
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "PIP_CERT",
    "NODE_EXTRA_CA_CERTS",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "CARGO_HTTP_CAINFO",
)
TINI = "/opt/cubicle/bin/tini"

PYTHON = "/opt/cubicle/bin/python3"
PREPARE = "/opt/cubicle/bin/prepare.py"
TOOLBOX = "/opt/cubicle/toolbox"
TOOLBOX_STAGED = "/opt/cubicle/toolbox.new"
"""Where the toolbox layer copies the toolbox; PREPARE_SOURCE moves it to TOOLBOX, in place of anything there."""
SANDBOX_TINI = "/usr/bin/tini-static"
ENV_LINES = (
    "HOME=/home/agent",
    "USER=agent",
    "PYTHONDONTWRITEBYTECODE=1",
    "GIT_AUTHOR_NAME=cubicle",
    "GIT_AUTHOR_EMAIL=agent@cubicle.invalid",
    "GIT_COMMITTER_NAME=cubicle",
    "GIT_COMMITTER_EMAIL=agent@cubicle.invalid",
)
"""The sandbox image's own ENV (its Dockerfile), minus LANG: an image keeps its locale."""
MARK = "cubicle: "
"""Lines of the layer's check that start with this are the error a person reads."""

_DIRECTIVE = re.compile(r"^#\s*([A-Za-z][A-Za-z0-9_-]*)\s*=\s*(\S*)\s*$")


def ca_lines(ca_image: str) -> list[str]:
    """The lines inserted after each FROM: the CA copied from its image, and the variables that name it."""
    variables = " ".join(f"{name}={CA_PATH}" for name in CA_VARIABLES)
    return [f"COPY --from={ca_image} /ca-certificates.crt {CA_PATH}", f"ENV {variables}"]


def after_each_from(text: str, lines: list[str]) -> str:
    """``text`` (a Dockerfile) with ``lines`` inserted after every FROM instruction, continuation lines included.

    Parser directives (``# escape=``) are honoured; comments and blank lines inside an
    instruction do not end it, as in Docker's own parser.
    """
    physical = text.splitlines()
    escape = _escape(physical)
    out: list[str] = []
    inside = is_from = False
    for line in physical:
        out.append(line)
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue  # a comment or blank line, between instructions or inside one
        if not inside:
            is_from = stripped.split(None, 1)[0].upper() == "FROM"
            inside = True
        if stripped.endswith(escape):
            continue
        inside = False
        if is_from:
            out.extend(lines)
    if inside and is_from:
        out.extend(lines)
    return "\n".join(out) + "\n"


def _escape(physical: list[str]) -> str:
    """The Dockerfile's escape character: its ``# escape=`` parser directive's, else a backslash."""
    escape = "\\"
    for line in physical:
        directive = _DIRECTIVE.match(line)
        if not directive:
            break
        if directive.group(1).lower() == "escape" and directive.group(2):
            escape = directive.group(2)[0]
    return escape


CHECK = f"""set -e
missing=
command -v python3 >/dev/null 2>&1 || missing="python3 (3.10 or later)"
command -v bash >/dev/null 2>&1 || missing="${{missing:+$missing and }}bash"
if [ -n "$missing" ]; then
  echo "{MARK}the image has no $missing on its PATH ($PATH); Cubicle's toolbox needs it, so install it in the image." >&2
  exit 1
fi
if ! python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)'; then
  echo "{MARK}the image's python3 is $(python3 -V 2>&1); Cubicle's toolbox needs Python 3.10 or later (it uses os.eventfd)." >&2
  exit 1
fi
exec python3 -I -S -B {PREPARE}
"""
"""The layer's check, run by /bin/sh: the two programs the toolbox needs, and Python's version."""

PREPARE_SOURCE = f'''"""Cubicle's toolbox layer: check that this Python runs the toolbox, then lay out what the sandbox expects."""
import os
import shlex
import shutil
import subprocess
import sys

sys.dont_write_bytecode = True
version = sys.version.split()[0]
# The toolbox arrives beside its place: whatever the base image has at /opt/cubicle/toolbox (an older toolbox and its
# bytecode, say) goes, so nothing of it can be imported in place of ours.
if os.path.isdir("{TOOLBOX}") and not os.path.islink("{TOOLBOX}"):
    shutil.rmtree("{TOOLBOX}")
elif os.path.lexists("{TOOLBOX}"):
    os.remove("{TOOLBOX}")
shutil.move("{TOOLBOX_STAGED}", "{TOOLBOX}")  # a copy: the staged one is in a lower layer of this build
executable = os.path.realpath(sys.executable or shutil.which("python3") or "")
if not executable or not os.access(executable, os.X_OK):
    sys.exit("{MARK}cannot find the path of the image's python3 executable.")
sys.path.append("/opt/cubicle")
try:
    import ctypes  # noqa: F401  (the toolbox guards itself with it)
    import toolbox.guardian, toolbox.processes, toolbox.protocol, toolbox.relay, toolbox.search  # noqa: F401
except Exception as err:  # noqa: BLE001
    sys.exit("{MARK}the image's python3 " + version + " cannot run the toolbox: " + type(err).__name__ + ": " + str(err))
import compileall
import py_compile

# The toolbox's bytecode, by this Python, so no sandbox start compiles it again (see the sandbox image's Dockerfile).
unchecked = py_compile.PycInvalidationMode.UNCHECKED_HASH
if not compileall.compile_dir("{TOOLBOX}", quiet=1, force=True, invalidation_mode=unchecked):
    sys.exit("{MARK}the image's python3 " + version + " could not compile the toolbox.")
if os.path.lexists("{PYTHON}"):
    os.remove("{PYTHON}")
os.symlink(executable, "{PYTHON}")
os.chmod("{TINI}", 0o111)  # execute-only: tini starts undumpable (see the sandbox image's Dockerfile)
for directory in ("/workspace", "/home/agent"):
    os.makedirs(directory, exist_ok=True)
os.chmod("/home/agent", 0o1777)
for top, dirs, files in os.walk("/opt/cubicle"):
    os.chown(top, 0, 0)
    os.chmod(top, 0o755)
    for name in files:
        path = os.path.join(top, name)
        if not os.path.islink(path):
            os.chown(path, 0, 0)
            if path != "{TINI}":
                os.chmod(path, 0o755 if path == "{READABLE_TINI}" else 0o644)
if os.path.isdir("/etc/profile.d"):  # login shells (run_command) keep the image's PATH, not /etc/profile's
    with open("/etc/profile.d/cubicle.sh", "w") as profile:
        profile.write(
            "export PATH=\\"$HOME/.local/bin\\":" + shlex.quote(os.environ.get("PATH", "/usr/bin:/bin")) + "\\n"
            + "export PAGER=cat GIT_PAGER=cat TERM=dumb\\n"
        )
if shutil.which("git"):
    subprocess.run(["git", "config", "--system", "--add", "safe.directory", "*"], check=False)
print("{MARK}toolbox ready on " + executable + " (Python " + version + ")")
'''
"""Run as ``python3 -I -S -B`` by CHECK: ``PYTHON`` links to the Python found, which runs the toolbox from then on."""


def _quoted(text: str) -> str:
    """A Dockerfile double-quoted word: control characters dropped, quotes and backslashes escaped."""
    clean = "".join(c if c.isprintable() else "?" for c in text)
    return '"' + clean.replace("\\", "\\\\").replace('"', '\\"') + '"'


def toolbox_layer(base_id: str, sandbox_image: str, ca_image: str | None, labels: dict[str, str] | None = None) -> str:
    """The Dockerfile of the toolbox layer over ``base_id``; ``toolbox/`` and ``prepare.py`` are its context.

    ``labels`` go in one LABEL line at the end, so every step before it is cached across definitions.
    """
    lines = [
        f"FROM {base_id}",
        "USER 0",  # by number: an image may have no /etc/passwd (and a Dockerfile has no trailing comments)
        f"COPY --from={sandbox_image} {SANDBOX_TINI} {TINI}",
        f"COPY --from={sandbox_image} {READABLE_TINI} {READABLE_TINI}",
        f"COPY --from={sandbox_image} {STATX_SHIM} {STATX_SHIM}",
        *(ca_lines(ca_image) if ca_image else []),
        f"COPY toolbox/ {TOOLBOX_STAGED}/",
        f"COPY prepare.py {PREPARE}",
        f"RUN {json.dumps(['/bin/sh', '-c', CHECK])}",
        "ENV " + " ".join(ENV_LINES),
        "WORKDIR /workspace",
        f'ENTRYPOINT ["{TINI}", "--"]',
        f'CMD ["{PYTHON}", "-I", "-S", "-u", "/opt/cubicle/toolbox"]',
    ]
    if labels:
        lines.append("LABEL " + " ".join(f"{_quoted(key)}={_quoted(value)}" for key, value in sorted(labels.items())))
    return "\n".join(lines) + "\n"


def packages_layer(base_id: str, packages: tuple[str, ...], ca_image: str | None) -> str:
    """The Dockerfile that installs Debian ``packages`` (names checked by ``Environment``) on ``base_id`` with
    apt-get, as root, leaving apt's lists out of the image; the base must be Debian's or a derivative of it."""
    install = (
        "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
        f"{' '.join(packages)} && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb"
    )
    lines = [f"FROM {base_id}", "USER 0", *(ca_lines(ca_image) if ca_image else []), f"RUN {install}"]
    return "\n".join(lines) + "\n"


CA_DOCKERFILE = "FROM scratch\nCOPY ca-certificates.crt /ca-certificates.crt\n"
