"""The guardian: the toolbox's front under runtimes that do not protect an undumpable process (gVisor).

Under runc the toolbox runs as the repository's owner and makes itself undumpable, and the
kernel then keeps every command, although it has the same uid, out of the toolbox's
``/proc/<pid>/fd``: the controller's stdio stays the toolbox's own. gVisor's kernel (as of
the Debian runsc) lets a process of the same uid open ``/proc/<pid>/fd/1`` of an undumpable
one and write into the controller's stream. So under such a runtime the container starts
as root with only CAP_SETUID, CAP_SETGID and CAP_SETPCAP, and this module runs first:

1. it empties the bounding set (CAP_SETPCAP's one use), so no process started after can ever hold a capability,
   and installs the toolbox's seccomp filter (``seccomp``): no process after it can make a namespace;
2. it forks the toolbox proper (the worker), which becomes the owner's uid and gid, with no
   supplementary groups, on pipes of its own: the worker never holds the controller's stdio;
3. it gives up root for a uid of its own (``guardian_uid``), losing every capability, so
   no command can open its ``/proc`` entries or signal it;
4. it relays (``relay``, imported only then): each request line from the controller goes to the
   worker; each line the worker writes is checked before it goes to the controller.

The worker runs as the agent's uid. Its pipes are root's, and this gVisor keeps commands out of
them (measured: tests/security/test_toolbox_takeover.py), but nothing here relies on that: a
worker's answers are only ever results, which the agent shapes anyway by writing files, and
what the guardian forwards is only one well-formed JSON answer per request the controller
sent and has not had answered: a line that does not parse, names no such request, or is
too long is dropped. A worker
that exits ends the guardian, and so the container (tini, pid 1, exits with it); its
stderr is passed on escaped to printable ASCII and bounded.
"""

from __future__ import annotations

import os

from . import seccomp

OWNER_VARIABLE = "CUBICLE_OWNER"
"""``uid:gid`` of the repository's owner, set by the controller for containers that start as root."""
NOBODY = 65534
PR_CAPBSET_READ, PR_CAPBSET_DROP = 23, 24


def owner(environ: dict[str, str]) -> tuple[int, int]:
    """The owner ``uid:gid`` the controller named, taken out of ``environ``; neither may be root."""
    text = environ.pop(OWNER_VARIABLE, "")
    try:
        uid, gid = (int(part) for part in text.split(":"))
    except ValueError:
        raise SystemExit(f"toolbox: started as root without a valid {OWNER_VARIABLE} (uid:gid), not {text!r}") from None
    if uid <= 0 or gid < 0:
        raise SystemExit(f"toolbox: the commands' owner must not be root ({text})")
    return uid, gid


def guardian_uid(agent_uid: int) -> int:
    """The uid the guardian keeps: nobody's, or the one below it when the agent is nobody."""
    return NOBODY if agent_uid != NOBODY else NOBODY - 1


def empty_bounding_set() -> None:
    """Take every capability out of the bounding set (this needs CAP_SETPCAP), so that no process started from
    here on can ever hold one; the guardian keeps SETUID and SETGID in its effective set until it drops root."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    try:  # one system call per capability (each costs about 50 µs under gVisor) rather than two
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except (OSError, ValueError):
        last = -1  # then each capability is read before it is dropped
    cap = 0
    # past ``last``, or without it, on while the kernel knows the capability (-1, EINVAL, past its last one)
    while cap <= last or libc.prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0:
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise SystemExit(f"toolbox: cannot drop capability {cap} from the bounding set: "
                             f"{os.strerror(ctypes.get_errno())}")  # fmt: skip
        cap += 1


def split(workspace: str) -> None:
    """Fork: return in the child as the worker (the owner's uid, its stdio the pipes to the guardian), so that the
    caller goes on as the toolbox; never return in the parent, which drops root and relays until the end.

    A fork and not a new interpreter: under gVisor's ptrace platform a second Python start (its imports, ctypes)
    costs a third of a second more before the sandbox is ready. Nothing but this thread runs yet, so the fork is
    safe; the pipes are made here, by root, so their ends are root's and no command can open them through /proc.
    """
    environ = dict(os.environ)
    uid, gid = owner(environ)
    empty_bounding_set()
    seccomp.install()  # no namespaces from here on, for the toolbox and every command (see seccomp)
    requests_r, requests_w = os.pipe()
    answers_r, answers_w = os.pipe()
    stderr_r, stderr_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            for mine, fd in ((requests_r, 0), (answers_w, 1), (stderr_w, 2)):
                os.dup2(mine, fd)
            for fd in (requests_r, requests_w, answers_r, answers_w, stderr_r, stderr_w):
                os.close(fd)
            _become(uid, gid)
            os.chdir(workspace)
            os.environ.clear()
            os.environ.update(environ)  # what the toolbox keeps for its commands
        except BaseException as err:  # noqa: BLE001 - the child must never go on as root, nor return to the caller
            os.write(2, f"toolbox: the worker could not start: {err}\n".encode())
            os._exit(1)
        return
    try:
        for fd in (requests_r, answers_w, stderr_w):
            os.close(fd)
        mine = guardian_uid(uid)
        _become(mine, mine)
        from . import relay  # only now: the fork copied a process without it, and the worker imports meanwhile

        to_worker, from_worker = os.fdopen(requests_w, "wb", buffering=0), os.fdopen(answers_r, "rb")
        relay.guard(pid, to_worker, from_worker, os.fdopen(stderr_r, "rb"))
    except BaseException as err:  # noqa: BLE001 - the parent must never go on as the toolbox
        os.write(2, f"toolbox: the guardian could not relay: {err}\n".encode("ascii", "replace"))
        os._exit(1)


def _become(uid: int, gid: int) -> None:
    """Give up root for ``uid``/``gid`` (real, effective and saved), with no supplementary groups: every
    capability goes with it."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
