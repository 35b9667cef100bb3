"""A fork server: one resident process per workspace that has done a service's imports once
and forks a child per request, so that a request pays a fork (a few milliseconds) instead of
a Python start and its imports (agentos.mcp_server.forkserver: ``mcp``, ~0.6 s of CPU;
agentos.cli.server: what ``agentos route`` decides with).

multiprocessing's forkserver does this for one program and ends with it; this one is shared
by the workspace's processes (each ``agentos run`` or ``agentos route`` its own), so it
outlives them and is found by its socket.

**The socket** lies in the workspace (``.agentos/NAME-KEY.sock``, the server's log beside it
as ``NAME-KEY.log``), which no sandbox shows, and only its own user may connect (the
peer's uid is checked). The key names the interpreter and the AgentOS package, so that two
installations never serve each other (and more: see :func:`socket_path`). The
first client binds it and hands it to the server it starts as an inherited descriptor: its
request waits in the socket's backlog while the server imports, never for a start.

**A request** is a marshalled dict behind its length (4 bytes, big-endian): the service's
fields, and the client's environment, working directory and umask, which the child takes
on; its descriptors go as SCM_RIGHTS. (marshal, not JSON: client and server are one
interpreter of one installation, and the client half imports neither ``json`` nor
``socket.py`` nor ``hashlib``, ~10 ms of every ``agentos route``.) The server answers
``stale`` and ends when a module it imported changed on disk since it started (an upgrade,
an edit): the client then starts a new one. Otherwise it forks; the child answers
``pid N`` with a pidfd of itself, serves, answers ``exit CODE`` and ends (each a line). A
client that closes its connection tells the child to stop (what the child does with that is
the service's).

**The server ends** when no request came for its idle time, when its socket is removed or
replaced (the workspace removed, or another server of it started), or when it answers
``stale``.
"""

from __future__ import annotations

import _socket  # (socket.py's enums cost ~3 ms of every hop: the client uses the C module)
import array
import marshal
import os
import sys

from agentos.shared.sockets import UnixAddress

# (The client's half imports only the above: it is paid on the path of `agentos route`, so
# not typing, pathlib, contextlib, json, hashlib or socket.py either. The server's half
# imports the rest where it is used.)
TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from collections.abc import Callable
    from typing import Any

    # The child's work: (its connection, the request's service fields, its descriptors) ->
    # its exit status. It runs with the client's environment, directory and umask.
    Handler = Callable[[socket.socket, dict[str, Any], list[int]], int]
    Where = str | os.PathLike[str]  # a socket's path

IDLE_ENV = "AGENTOS_FORKSERVER_IDLE"  # seconds a fork server waits for a request, then ends
IDLE = 600
MAX_REQUEST = 1 << 20  # bytes of a request line
REQUEST_TIMEOUT = 5.0  # seconds a client has to send its request
TICK = 2.0  # seconds between the server's looks at its socket file and its idle time
STALE = b"stale\n"
_LENGTH = 4  # bytes of a request's length, before it
FIRST_ANSWER = 10.0  # seconds a running server has to fork (milliseconds, once imported)


# --- the client ------------------------------------------------------------------------------


def idle() -> str:
    """How long a fork server started now waits for a request (``AGENTOS_FORKSERVER_IDLE``)."""
    return os.environ.get(IDLE_ENV, "").strip() or str(IDLE)


def socket_path(state_dir: Where, name: str) -> str:
    """Where the workspace's fork server ``name`` listens for processes like this one: of
    this installation, started with the same interpreter settings, in the same control
    groups, under the same limits (what a forked child keeps of its server, not of its
    client: a server shared across those would put one run's agents in another's group,
    where ending that group ends them). The key's BLAKE2b (64 bits: a name, not a secret;
    the C module, not hashlib, whose OpenSSL costs every hop ~2 ms): who may use a server
    is the socket's folder's and the server's peer check's to say."""
    try:
        from _blake2 import blake2b
    except ImportError:  # (an interpreter built without it)
        from hashlib import blake2b

    import agentos

    interpreter = (sys.flags, sys.warnoptions, sys._xoptions)
    key = "\0".join(
        [
            sys.executable,
            os.path.dirname(agentos.__file__),
            inherited(),
            repr(sorted((k, v) for k, v in _start_env().items() if k not in ("PATH", "HOME"))),
            repr(interpreter),
        ]
    )
    digest = blake2b(key.encode("utf-8", "surrogateescape"), digest_size=8).hexdigest()
    return os.path.join(state_dir, f"{name}-{digest}.sock")


# What /proc/PID/status says of a process's privileges (a forked child keeps its server's).
_PRIVILEGES = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb",
               "NoNewPrivs", "Seccomp")  # fmt: skip


def inherited(pid: int | str = "self") -> str:
    """What process ``pid`` has that a forked child keeps of its server, not of its caller:
    its namespaces, root, control groups, credentials and privileges, nice value and
    resource limits (the limits of this process only: another's are not read here)."""
    proc = f"/proc/{pid}"
    parts = []
    try:
        for ns in sorted(os.listdir(f"{proc}/ns")):
            parts.append(os.readlink(f"{proc}/ns/{ns}"))
        parts.append(os.readlink(f"{proc}/root"))
        with open(f"{proc}/cgroup") as fh:
            parts.append(fh.read())
        with open(f"{proc}/status") as fh:
            parts += [line for line in fh if line.split(":", 1)[0] in _PRIVILEGES]
        with open(f"{proc}/stat") as fh:
            parts.append(fh.read().rpartition(")")[2].split()[16])  # nice
    except OSError:
        parts.append("?")
    if pid == "self":
        import resource

        kinds = ("AS", "CORE", "CPU", "DATA", "FSIZE", "NOFILE", "NPROC", "STACK")
        parts.append(repr([resource.getrlimit(getattr(resource, f"RLIMIT_{k}")) for k in kinds]))
    return "\0".join(parts)


def _start_env() -> dict[str, str]:
    """The environment a server starts with: what the interpreter reads as it starts (its
    search path made absolute: the server runs in /), nothing else of the caller's (each
    child takes its caller's whole environment)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k in ("PATH", "HOME", "LANG") or k.startswith(("LC_", "PYTHON"))
    }
    if env.get("PYTHONPATH"):
        parts = env["PYTHONPATH"].split(os.pathsep)
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) if p else p for p in parts)
    return env


def _connect(path: Where) -> _socket.socket:
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        with UnixAddress(path) as address:
            sock.connect(address)
    except BaseException:
        sock.close()
        raise
    return sock


def connect(
    path: Where, start: list[str], replace: int | None = None, *, attach: bool = True
) -> tuple[_socket.socket | None, bool]:
    """A connection to the fork server at ``path``, and whether it was started for it
    (``start``, the server's command, given ``--fd FD --socket PATH`` after it; its output
    to the ``.log`` beside its socket). With ``replace``, the inode of a server's socket
    that did not answer: a new server is started in its place (the old one, when it wakes,
    finds its socket gone and ends). Without ``attach``, a server started is not connected
    to (None: it serves the next request). A server that cannot be started raises OSError."""
    if replace is None:
        try:
            return _connect(path), False
        except (FileNotFoundError, ConnectionRefusedError):
            pass
    import contextlib
    import fcntl
    import socket
    import subprocess

    path = os.fspath(path)
    stem = os.path.splitext(path)[0]
    with open(f"{stem}.lock", "a") as lock:  # one starter at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        if replace is None or _inode(path) != replace:  # (another starter replaced it)
            with contextlib.suppress(FileNotFoundError, ConnectionRefusedError):
                return _connect(path), False
        with contextlib.suppress(FileNotFoundError):  # a socket left by one that ended, or
            os.unlink(path)  # did not answer
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with listener:
            with UnixAddress(path) as address:
                listener.bind(address)
            listener.listen(64)
            with open(f"{stem}.log", "ab") as out:
                fd = str(listener.fileno())
                server = subprocess.Popen(
                    [*start, "--fd", fd, "--socket", path],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=out,
                    pass_fds=[listener.fileno()],
                    start_new_session=True,
                    cwd="/",  # it holds no directory of the user's (each child has its own)
                    env=_start_env(),
                )
            import threading  # reaped when it ends, or it stays a zombie of this process

            threading.Thread(target=server.wait, name="agentos-forkserver", daemon=True).start()
            if not attach:  # (started for the next request)
                return None, True
            return _connect(path), True  # (in the backlog until it has imported)


def send(conn: _socket.socket, fields: dict[str, Any], fds: list[int]) -> None:
    """The request: ``fields``, the caller's environment, directory and umask, ``fds``."""
    mask = os.umask(0o022)
    os.umask(mask)
    try:
        cwd = os.getcwd()
    except OSError:  # removed under it: the child works from /
        cwd = "/"
    process = {"env": dict(os.environ), "cwd": cwd, "umask": mask}
    body = marshal.dumps({**fields, "process": process})
    data = len(body).to_bytes(_LENGTH, "big") + body
    sent = send_fds(conn, data, fds)
    if sent < len(data):  # (never a send of nothing: the child may be done and gone)
        conn.sendall(data[sent:])


def answer(conn: _socket.socket, timeout: float | None) -> tuple[bytes, list[int]]:
    """The next line the server or its child sends, and the descriptors with it (b"" when
    the connection ended; TimeoutError after ``timeout`` seconds)."""
    conn.settimeout(timeout)
    data, fds = recv_fds(conn, 1, 1)
    try:
        while data and not data.endswith(b"\n") and len(data) < 4096:
            chunk, more = recv_fds(conn, 1, 1)
            fds += more
            if not chunk:
                break
            data += chunk
    except BaseException:  # (a timeout after the line began: its descriptors are not kept)
        for fd in fds:
            os.close(fd)
        raise
    for fd in fds:  # (received inheritable: kept from what this process starts)
        os.set_inheritable(fd, False)
    return data, fds


def said(data: bytes, word: str) -> int | None:
    """N of an answer ``WORD N`` (``pid``, ``exit``); None when ``data`` is not one."""
    head, _, value = data.rstrip(b"\n").partition(b" ")
    if head != word.encode() or not value.removeprefix(b"-").isdigit():
        return None
    return int(value)


# socket.py's send_fds and recv_fds, on the C module's socket (see the imports).
def send_fds(sock: _socket.socket, data: bytes, fds: list[int]) -> int:
    return sock.sendmsg([data], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, array.array("i", fds))])


def recv_fds(sock: _socket.socket, size: int, max_fds: int) -> tuple[bytes, list[int]]:
    fds = array.array("i")
    data, ancillary, _, _ = sock.recvmsg(size, _socket.CMSG_LEN(max_fds * fds.itemsize))
    for level, kind, cdata in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fds.frombytes(cdata[: len(cdata) - (len(cdata) % fds.itemsize)])
    return data, list(fds)


def request(
    path: Where, start: list[str], fields: dict[str, Any], fds: list[int], wait: bool = True
) -> tuple[_socket.socket, tuple[bytes, list[int]] | None] | None:
    """Send a request to the fork server at ``path``: the connection, and the child's first
    answer (its pid line and pidfd).

    When no server answers, one is started; with ``wait`` the request waits for it (the
    first answer is then None: read it with :func:`answer`), without it the request is not
    sent at all (None: the caller does the work itself, the next one finds the server up).
    A server found stale or gone is started anew; one that does not fork within
    FIRST_ANSWER seconds is replaced (it never forks for a request whose client has gone).
    OSError when no server can take it."""
    replace: int | None = None
    for _ in range(3):
        conn, started = connect(path, start, replace, attach=wait)
        if conn is None:  # started, and not waited for
            return None
        try:
            send(conn, fields, fds)
        except OSError:  # it ended as it took the connection: nothing was forked
            conn.close()
            continue
        if started:
            return conn, None
        try:
            data, got = answer(conn, FIRST_ANSWER)
        except TimeoutError:  # stopped, or stuck: replaced by a new one
            conn.close()
            replace = _inode(path)
            continue
        except OSError:
            data, got = b"", []
        if said(data, "pid") is not None:
            return conn, (data, got)
        for fd in got:
            os.close(fd)
        conn.close()  # stale, or it ended as it took the connection: a new one is started
    raise OSError(f"the fork server at {path} could not take a request")


# --- the server ------------------------------------------------------------------------------


def _stamps() -> dict[str, tuple[int, int]]:
    """(mtime, size) of every module file loaded: a change means an upgrade or an edit."""
    found: dict[str, tuple[int, int]] = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and path not in found:
            try:
                st = os.stat(path)
            except OSError:
                continue
            found[path] = (st.st_mtime_ns, st.st_size)
    return found


def _changed(stamps: dict[str, tuple[int, int]]) -> str | None:
    for path, stamp in stamps.items():
        try:
            st = os.stat(path)
        except OSError:
            return path
        if (st.st_mtime_ns, st.st_size) != stamp:
            return path
    return None


def _inode(path: Where) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _gone(conn: socket.socket) -> bool:
    """Whether the client closed its connection after its request."""
    import select
    import socket

    if not select.select([conn], [], [], 0)[0]:
        return False
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def _read_request(conn: socket.socket, max_fds: int) -> tuple[bytes, list[int]]:
    """The client's request, unread, and its descriptors (ValueError when it does not come
    whole within its time and size). It is read by the child (:func:`_parsed`): marshal
    trusts the lengths in its data, and a few bytes can ask it for gigabytes and seconds
    that the one-at-a-time loop must not spend."""
    import time

    deadline = time.monotonic() + REQUEST_TIMEOUT  # for the whole request: one that comes
    # a byte at a time would hold up every other client of this one-at-a-time loop
    conn.settimeout(REQUEST_TIMEOUT)
    data, fds = recv_fds(conn, 65536, max_fds)
    try:
        for fd in fds:
            os.set_inheritable(fd, False)
        length = int.from_bytes(data[:_LENGTH], "big") if len(data) >= _LENGTH else None
        if length is not None and length > MAX_REQUEST:
            raise ValueError("a request over the limit")
        while length is None or len(data) < _LENGTH + length:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ValueError("a request not sent within its time")
            conn.settimeout(left)
            chunk = conn.recv(65536)
            if not chunk:
                raise ValueError("a request cut short")
            data += chunk
            if length is None and len(data) >= _LENGTH:
                length = int.from_bytes(data[:_LENGTH], "big")
                if length > MAX_REQUEST:
                    raise ValueError("a request over the limit")
        if len(data) != _LENGTH + length:
            raise ValueError("a request followed by more")
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return data[_LENGTH:], fds


def _parsed(body: bytes) -> dict[str, Any]:
    """A request's fields (ValueError when it is not one)."""
    try:  # (from a process of this user only: see serve)
        request = marshal.loads(body)
    except (EOFError, TypeError, ValueError) as exc:
        raise ValueError(f"a request that does not read: {exc}") from None
    process = request.get("process") if isinstance(request, dict) else None
    if not (
        isinstance(process, dict)
        and isinstance(process.get("env"), dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in process["env"].items())
        and isinstance(process.get("cwd"), str)
        and isinstance(process.get("umask"), int)
    ):
        raise ValueError("a request without the client's environment, directory and umask")
    fields: dict[str, Any] = request
    return fields


class _Refused(Exception):
    """A request the child cannot read (said in the server's log)."""


def _child(
    listener: socket.socket, conn: socket.socket, body: bytes, fds: list[int], handle: Handler
) -> None:
    """The forked child: never returns (it ends the process). A request that does not read
    is refused here (one line in the server's log; ``exit 1`` without a pid first)."""
    import contextlib
    import signal
    import traceback

    code = 1
    try:
        listener.close()
        os.setsid()
        try:
            request = _parsed(body)
        except ValueError as exc:
            print(f"a request was refused: {exc}", file=sys.stderr)
            raise _Refused from None
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as Python starts
        process = request.pop("process")
        import logging  # as a new process has it: the server's own handler is not the child's

        logging.root.handlers.clear()
        logging.root.setLevel(logging.WARNING)
        os.environ.clear()
        os.environ.update(process["env"])
        import time

        time.tzset()  # (its TZ, not the server's)
        os.chdir(process["cwd"])
        os.umask(process["umask"])
        conn.settimeout(None)
        pidfd = os.pidfd_open(os.getpid())
        try:
            send_fds(conn, f"pid {os.getpid()}\n".encode(), [pidfd])
        finally:
            os.close(pidfd)
        code = handle(conn, request, fds)
    except _Refused:
        pass
    except BaseException:  # whatever happens, the child never goes back to the loop
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        with contextlib.suppress(BaseException):
            conn.sendall(f"exit {code}\n".encode())
        os._exit(code)


def serve(
    listener: socket.socket, path: str, idle: float, handle: Handler, max_fds: int = 3
) -> int:
    """Fork a child running ``handle`` per request until idle for ``idle`` seconds, or until
    ``path`` is no longer this server's socket, or until a module it imported changed."""
    import contextlib
    import logging
    import select
    import signal
    import socket
    import struct
    import time

    log = logging.getLogger(__name__)
    own = _inode(path)
    stamps = _stamps()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the children are reaped by the kernel
    last = time.monotonic()
    while True:
        ready, _, _ = select.select([listener], [], [], TICK)
        if not ready:
            if time.monotonic() - last > idle or _inode(path) != own:
                return 0
            continue
        try:
            conn, _ = listener.accept()
        except OSError:
            continue
        last = time.monotonic()
        with conn:
            cred = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            if struct.unpack("3i", cred)[1] != os.getuid():
                continue  # only its own user
            body: bytes | None
            try:
                body, fds = _read_request(conn, max_fds)
            except (OSError, ValueError) as exc:
                log.warning("a request was refused: %s", exc)
                body, fds = None, []
            try:  # (stale or not, after a refused request too: a client of a newer format)
                changed = _changed(stamps)
                if changed is not None:
                    log.warning("%s changed since it started: it ends", changed)
                    if _inode(path) == own:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(path)
                    with contextlib.suppress(OSError):
                        conn.sendall(STALE)
                    return 0
                if body is None or _gone(conn):
                    continue  # (refused, or it gave up waiting: the work is its own again)
                if os.fork() == 0:
                    _child(listener, conn, body, fds, handle)
            finally:
                for fd in fds:
                    os.close(fd)


def main(argv: list[str] | None, prog: str, preload: Callable[[], None], handle: Handler) -> int:
    """A fork server's process: ``--fd FD --socket PATH [--idle SECONDS]``."""
    import argparse
    import contextlib
    import logging
    import socket

    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--fd", type=int, required=True, help="the bound, listening socket")
    parser.add_argument("--socket", required=True, help="where it is bound")
    parser.add_argument("--idle", type=float, default=600.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level="WARNING", format=f"{prog} %(levelname)s: %(message)s")
    listener = socket.socket(fileno=args.fd)
    with contextlib.suppress(KeyboardInterrupt):
        preload()
        return serve(listener, args.socket, args.idle, handle)
    return 0
