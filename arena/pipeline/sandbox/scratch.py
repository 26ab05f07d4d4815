"""Where an attack may write, and what is left of it afterwards: nothing.

Run as root, the attack's process takes, before it changes user (``private_mounts``), a mount namespace of its
own, in which:

* ``/dev/shm`` is a fresh tmpfs of ``tmp_bytes`` (``ARENA_SANDBOX_TMP_BYTES``, default 256M), the attack's alone:
  what it writes there counts against that quota (a full tmpfs is ``ENOSPC``, the attack's failure) and is freed
  with the namespace when its last process dies; ``TMPDIR`` (``TMP``, ``TEMP``) points into it, so ``tempfile``
  and libraries that follow it write there too;
* Ray's temporary folders (``/tmp/ray``, ``$RAY_TMPDIR/ray``: its sessions' sockets, logs and runtime
  resources) are covered by an empty, read-only tmpfs: the attack cannot see, rename or write into them.

Where no namespace can be made (not root, no ``CAP_SYS_ADMIN``), the attack writes where its user may. Either way,
when its process ends, ``sweep_files`` removes every file, folder and link its user owns under the scratch roots
(``/tmp``, ``/var/tmp``, ``/dev/shm``), at any depth of the folders that user could reach and write (Ray's
world-writable session folders included), never following a link. The Ray driver's own sockets folder is closed
to other users as soon as the arena starts Ray (``close_sockets``), where a namespace is not made.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import stat
import tempfile

SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm")  # where any user may leave files
TMP_VARIABLES = ("TMPDIR", "TMP", "TEMP")
_CLONE_NEWNS = 0x00020000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REC, _MS_PRIVATE = 0x4000, 1 << 18


def ray_roots() -> list[str]:
    """Ray's temporary folders on this machine (its default, and ``$RAY_TMPDIR``'s)."""
    bases = ["/tmp", os.environ.get("RAY_TMPDIR", "")]
    return sorted({os.path.join(os.path.abspath(b), "ray") for b in bases if b})


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _mount(source: str, target: str, kind: str | None, flags: int, data: str | None) -> None:
    libc = _libc()
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    if libc.mount(source.encode(), target.encode(), kind.encode() if kind else None, flags,
                  data.encode() if data else None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def private_mounts(tmp_bytes: int) -> str:
    """Before the user change, as root: the attack's own mount namespace, a private ``/dev/shm`` of ``tmp_bytes``
    (its ``TMPDIR``), Ray's temporary folders hidden. Say what holds; nothing is changed where it cannot be."""
    if os.geteuid() != 0 or not os.path.isdir("/dev/shm") or tmp_bytes <= 0:
        return "no private scratch (not root)"
    if _libc().unshare(_CLONE_NEWNS) != 0:
        return f"no private scratch (unshare: {os.strerror(ctypes.get_errno())})"
    try:
        _mount("none", "/", None, _MS_REC | _MS_PRIVATE, None)  # nothing mounted here reaches the host
        _mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={tmp_bytes},mode=1777")
        for root in ray_roots():
            if os.path.isdir(root):
                _mount("tmpfs", root, "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "size=4k,mode=0555")
    except OSError as exc:
        return f"private scratch incomplete ({exc})"
    for name in TMP_VARIABLES:
        os.environ[name] = "/dev/shm"
    tempfile.tempdir = None  # tempfile reads TMPDIR again
    return f"private /dev/shm of {tmp_bytes} bytes; Ray's folders hidden"


MTIME_SLACK = 2.0
"""Seconds a folder's modification time may lag the clock an attack's start was read from (the kernel stamps
with a coarse clock)."""


def sweep_files(uid: int, roots: tuple[str, ...] = SCRATCH_DIRS, since: float | None = None) -> None:
    """Remove whatever the user ``uid`` owns under ``roots``, at any depth, descending only into folders a user
    without groups could enter (others may search them) and never following a link: the only places it could
    have written.

    With ``since`` (the attack's start, ``time.time()``), a folder last modified before it is not listed beyond
    its subfolders: every entry made in a folder (made, linked or renamed there) stamps the folder's modification
    time with the present, and a user who does not own a folder cannot set that time back, so such a folder holds
    nothing of ``uid``'s. A ``/tmp`` of many files is then swept by a stat of its folders only."""
    for root in roots:
        _sweep_dir(root, uid, 0, None if since is None else since - MTIME_SLACK)


def _sweep_dir(path: str, uid: int, depth: int, since: float | None) -> None:
    if depth > 64:
        return
    changed = True
    if since is not None:
        with contextlib.suppress(OSError):
            changed = os.stat(path, follow_symlinks=False).st_mtime >= since
    with contextlib.suppress(OSError), os.scandir(path) as entries:
        for entry in list(entries):
            with contextlib.suppress(OSError):
                if not changed and not entry.is_dir(follow_symlinks=False):
                    continue
                info = entry.stat(follow_symlinks=False)
                if info.st_uid == uid:
                    if stat.S_ISDIR(info.st_mode):
                        shutil.rmtree(entry.path, ignore_errors=True)  # never follows a link inside
                    else:
                        os.unlink(entry.path)
                elif stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_IXOTH:
                    _sweep_dir(entry.path, uid, depth + 1, since)


def close_sockets(session_dir: str | None) -> None:
    """Run as root: the Ray session's sockets folder (``raylet``, ``plasma_store``) writable by its owner only, so
    no attack's user can rename or replace a socket in it (Ray makes it world-writable)."""
    if not session_dir or os.geteuid() != 0:
        return
    sockets = os.path.join(session_dir, "sockets")
    with contextlib.suppress(OSError):
        if os.stat(sockets, follow_symlinks=False).st_uid == os.geteuid():
            os.chmod(sockets, 0o755)
