"""A real smart-HTTP git server for the tests and the bench (``bench.remotes``): Debian's ``git-http-backend``
behind nginx and fcgiwrap, on 127.0.0.1 and a free port, its whole configuration, repositories and logs in one
temporary directory. It lives in ``bench`` (not shipped, as ``tests`` is not) because the tests already import from
the bench and the bench imports nothing of the tests.

``/private/<repo>.git`` asks for HTTP basic auth (an htpasswd file of one user) and takes pushes (git-http-backend
enables receive-pack for an authenticated user); ``/public/<repo>.git`` serves the same repositories to anyone,
read-only. nginx's access log records each request's status and the bytes sent, which the tests read to count
fetches and what they downloaded. Runs as root or not (``user`` is set only for root, and every path nginx
writes is under the directory). ``stop`` ends both processes and removes the directory.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

BACKEND = Path("/usr/lib/git-core/git-http-backend")
USER = "tester"

NGINX_CONF = """
worker_processes 1;
daemon off;
{user}
pid {dir}/nginx.pid;
error_log {dir}/error.log;
events {{ worker_connections 64; }}
http {{
  log_format bytes_sent '$request_method $uri $status $body_bytes_sent $remote_user';
  access_log {dir}/access.log bytes_sent;
  client_body_temp_path {dir}/tmp/body;
  fastcgi_temp_path {dir}/tmp/fastcgi;
  proxy_temp_path {dir}/tmp/proxy;
  uwsgi_temp_path {dir}/tmp/uwsgi;
  scgi_temp_path {dir}/tmp/scgi;
  client_max_body_size 0;
  server {{
    listen 127.0.0.1:{port};
    location ~ ^/private(/.*)$ {{
      auth_basic "git";
      auth_basic_user_file {dir}/htpasswd;
      {backend}
    }}
    location ~ ^/public(/.*)$ {{
      {backend}
    }}
  }}
}}
"""
BACKEND_CONF = """include /etc/nginx/fastcgi_params;
      fastcgi_param SCRIPT_FILENAME {backend};
      fastcgi_param GIT_PROJECT_ROOT {dir}/repos;
      fastcgi_param GIT_HTTP_EXPORT_ALL 1;
      fastcgi_param PATH_INFO $1;
      fastcgi_param HOME {dir}/home;
      fastcgi_pass unix:{dir}/fcgi.sock;"""


def available() -> bool:
    return all(shutil.which(name, path="/usr/sbin:/usr/bin") for name in ("nginx", "fcgiwrap")) and BACKEND.exists()


def plain_git_env(home: Path) -> dict[str, str]:
    """The environment of the tests' own git commands (making repositories, committing, pushing)."""
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "Tester",
        "GIT_AUTHOR_EMAIL": "tester@example.invalid",
        "GIT_COMMITTER_NAME": "Tester",
        "GIT_COMMITTER_EMAIL": "tester@example.invalid",
        "LC_ALL": "C",
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Request:
    """One line of the access log."""

    method: str
    uri: str
    status: int
    sent: int
    user: str


class GitServer:
    """The running server. ``url(name)`` is a repository's private URL; ``work(name)`` its working clone, in which
    ``commit`` makes a commit and pushes it to the served repository (on disk, not through the server)."""

    def __init__(self, password: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="cubicle-gitserver-"))
        os.chmod(self.dir, 0o755)
        self.password = password
        self.port = 0
        self.processes: list[subprocess.Popen[bytes]] = []
        for sub in ("repos", "work", "home", "tmp"):
            (self.dir / sub).mkdir()
        salted = hashlib.sha1(password.encode() + b"salt").digest() + b"salt"
        (self.dir / "htpasswd").write_text(f"{USER}:{{SSHA}}{base64.b64encode(salted).decode()}\n")

    def url(self, name: str, public: bool = False) -> str:
        return f"http://127.0.0.1:{self.port}/{'public' if public else 'private'}/{name}.git"

    def git(self, *args: str, cwd: Path | None = None) -> str:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=plain_git_env(self.dir / "home"),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout.strip()

    def bare(self, name: str) -> Path:
        return self.dir / "repos" / f"{name}.git"

    def work(self, name: str) -> Path:
        return self.dir / "work" / name

    def create(self, name: str, source: Path) -> Path:
        """A served repository from ``source``'s files: a first commit on ``main``, pushed."""
        work = self.work(name)
        shutil.copytree(source, work, symlinks=True)
        self.git("init", "--quiet", "--initial-branch=main", cwd=work)
        self.git("init", "--quiet", "--bare", "--initial-branch=main", str(self.bare(name)))
        self.git("config", "http.receivepack", "true", cwd=self.bare(name))
        self.commit(name, {}, f"Initial commit: {source.name}")
        return work

    def commit(self, name: str, files: dict[str, bytes], message: str) -> str:
        """Write ``files`` in the working clone, commit everything, push the branch and tags; the commit id."""
        work = self.work(name)
        for rel, data in files.items():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_bytes(data)
        self.git("add", "--all", cwd=work)
        self.git("commit", "--quiet", "--allow-empty", "-m", message, cwd=work)
        self.push(name)
        return self.git("rev-parse", "HEAD", cwd=work)

    def push(self, name: str) -> None:
        self.git("push", "--quiet", "--force", "--all", str(self.bare(name)), cwd=self.work(name))
        self.git("push", "--quiet", "--force", "--tags", str(self.bare(name)), cwd=self.work(name))

    def requests(self) -> list[Request]:
        lines = (self.dir / "access.log").read_text().splitlines()
        found = []
        for line in lines:
            method, uri, status, sent, user = line.split(" ")
            found.append(Request(method, uri, int(status), int(sent), user))
        return found

    def start(self) -> None:
        socket_path = self.dir / "fcgi.sock"
        fcgiwrap = ["fcgiwrap", "-c", "2", "-s", f"unix:{socket_path}"]
        self.processes.append(subprocess.Popen(fcgiwrap, start_new_session=True))
        _wait_for(socket_path.exists, "fcgiwrap's socket")
        for _attempt in range(5):
            self.port = free_port()
            (self.dir / "nginx.conf").write_text(self._conf())
            nginx = subprocess.Popen(
                ["nginx", "-p", str(self.dir), "-e", str(self.dir / "error.log"), "-c", str(self.dir / "nginx.conf")],
                start_new_session=True,
            )
            if _serving(self.port, nginx):
                self.processes.append(nginx)
                return
            _end(nginx)
        raise RuntimeError(f"nginx did not start: {(self.dir / 'error.log').read_text()[-2000:]}")

    def _conf(self) -> str:
        user = f"user {pwd.getpwuid(os.getuid()).pw_name};" if os.geteuid() == 0 else ""
        backend = BACKEND_CONF.format(backend=BACKEND, dir=self.dir)
        return NGINX_CONF.format(user=user, dir=self.dir, port=self.port, backend=backend)

    def groups(self) -> list[int]:
        """The process groups it runs (one each for fcgiwrap and nginx)."""
        return [proc.pid for proc in self.processes]

    def stop(self) -> None:
        for proc in reversed(self.processes):
            _end(proc)
        self.processes.clear()
        shutil.rmtree(self.dir, ignore_errors=True)


def _end(proc: subprocess.Popen[bytes]) -> None:
    """Stop ``proc``'s whole process group (fcgiwrap's preforked children, nginx's workers outlive their parent
    otherwise), then make sure none of it is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 10
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _serving(port: int, proc: subprocess.Popen[bytes]) -> bool:
    """Whether nginx listens on ``port`` (False as soon as it exits, e.g. the port was taken meanwhile)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
        time.sleep(0.05)
    return False


def _wait_for(condition: object, what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not appear")
        time.sleep(0.05)


@contextlib.contextmanager
def serving(password: str) -> Iterator[GitServer]:
    server = GitServer(password)
    try:
        server.start()
        yield server
    finally:
        server.stop()
