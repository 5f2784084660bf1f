/* Cubicle's statx shim, preloaded into commands under gVisor (runsc) only.
 *
 * The gVisor in Debian (release 20221219) rejects statx() with AT_NO_AUTOMOUNT as EINVAL; coreutils
 * (ls, stat, cp -a, du) pass that flag on every call, so each of them fails on every path. A container
 * has no automount points, so the flag changes nothing there: this statx() drops it and makes the
 * system call itself. Built with -nostdlib: it needs only syscall() from whichever libc loads it.
 */
#define AT_NO_AUTOMOUNT 0x800
#if defined(__x86_64__)
#define SYS_STATX 332
#elif defined(__aarch64__)
#define SYS_STATX 291
#else
#error "statx's system call number for this architecture is not known here"
#endif

extern long syscall(long number, ...);
struct statx;

int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *buf) {
    return (int)syscall(SYS_STATX, dirfd, path, flags & ~AT_NO_AUTOMOUNT, mask, buf);
}
