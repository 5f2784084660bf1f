"""Python programs a command runs to reach into another process: trace it, open its /proc files.

Fill in the target with ``.format(pid=...)`` and run them as ``python3 -c '...'``; each prints what
the kernel answered, one line per attempt.
"""

# PTRACE_ATTACH, then detach if it worked: prints the return code and errno ("-1 1" is EPERM).
TRACE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
rc = libc.ptrace(16, {pid}, None, None)  # PTRACE_ATTACH
print(rc, ctypes.get_errno())
if rc == 0:
    os.waitpid({pid}, 0)
    libc.ptrace(17, {pid}, None, None)  # PTRACE_DETACH
"""

# Open the process's stdout, stdin, memory and environment: prints "PATH opened" or the error for each.
OPEN = """
import os
for path, flags in (("fd/1", os.O_WRONLY), ("fd/0", os.O_RDONLY), ("mem", os.O_RDWR), ("environ", os.O_RDONLY)):
    try:
        os.close(os.open("/proc/{pid}/" + path, flags | os.O_NONBLOCK))
        print(path, "opened")
    except OSError as err:
        print(path, err.strerror)
"""
