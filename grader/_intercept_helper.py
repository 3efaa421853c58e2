"""The drift probe's TLS end: terminate HTTPS for the intercepted hosts, hand the plain bytes to the stand-in.

Started by grader/sandbox.py as ``python -I _intercept_helper.py ...`` in the run's own fresh network
namespace, after ``lo`` is up and before the sandboxed command starts: the grader's user and filesystem,
outside the mount namespace (grader/intercept.py builds the command). Standard library only. It

1. loads the leaf certificate chain and key (one PEM file, signed by the CA made for this run) and deletes
   the file, so it exists on disk only until the helper has read it;
2. listens on 127.0.0.1:PORT (443: binding it needs the privilege the sandboxed user has not);
3. forks: the parent exits 0 (the run may start: the listener is up), the child closes every other
   descriptor, gives up root (a uid that owns nothing) and serves until the run's process group is killed
   or its lifetime ends;
4. for each connection: the TLS handshake (ALPN http/1.1), then the bytes both ways to the stand-in on
   127.0.0.1:FORWARD. Requests are not parsed here: the stand-in reads them.

The CA's own key never reaches this process: grader/intercept.py signs the leaf and keeps the CA key in
memory only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import ssl
import sys
import threading

_NOBODY = 65534
_HANDSHAKE_TIMEOUT = 30.0
_CHUNK = 65536


def _listen(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    return sock


def _detach(*keep: int, stderr: int | None = None) -> None:
    """Stdio to /dev/null (the run's pipes must not stay open on us; ``stderr``: an fd to log to instead),
    every other inherited fd closed but ``keep``. Shared by the grader's other helpers beside a run
    (grader/_standin_helper.py, the serve probe's client)."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null if fd != 2 or stderr is None else stderr, fd)
    os.close(null)
    low = 3
    for fd in sorted(k for k in keep if k >= 3):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 65536)


def _real_root() -> bool:
    """Uid 0 of the initial user namespace (a grader run as root), not the mapped root of ``unshare -r``."""
    try:
        with open("/proc/self/uid_map", encoding="ascii") as handle:
            return handle.read().split()[:3] == ["0", "0", "4294967295"]
    except OSError:
        return True


def _drop(uid: int) -> None:
    """Give up root after the privileged part (the port, the key file).

    As real root a failure ends the helper (it never serves as root); under ``unshare -r`` (a grader not run
    as root) uid 0 is the grader's own user mapped, and the kernel refuses the change: it serves as that.
    """
    if os.getuid() != 0:
        return
    try:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    except OSError:
        if _real_root():
            raise


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, half_close: bool) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if half_close and writer.can_write_eof():
            writer.write_eof()  # the client finished sending; the answer may still be on its way
        else:
            writer.close()
    except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
        writer.close()


async def _serve(sock: socket.socket, context: ssl.SSLContext, forward: int) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", forward)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(
            _pipe(client_r, up_w, half_close=True),
            _pipe(up_r, client_w, half_close=False),
        )
        up_w.close()
        client_w.close()

    server = await asyncio.start_server(
        handle, sock=sock, ssl=context, ssl_handshake_timeout=_HANDSHAKE_TIMEOUT
    )
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="_intercept_helper")
    parser.add_argument("--chain", required=True, help="PEM: leaf certificate, CA certificate, leaf key")
    parser.add_argument("--port", type=int, default=443)
    parser.add_argument("--forward", type=int, required=True, help="the stand-in's port on 127.0.0.1")
    parser.add_argument("--lifetime", type=float, required=True, help="seconds to serve at most")
    args = parser.parse_args(argv)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.set_alpn_protocols(["http/1.1"])
    try:
        context.load_cert_chain(args.chain)
    finally:
        try:
            os.unlink(args.chain)
        except OSError:
            pass
    try:
        sock = _listen(args.port)
    except OSError as exc:
        print(f"intercept: cannot listen on 127.0.0.1:{args.port}: {exc.strerror}", file=sys.stderr)
        return 3
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork():
        return 0  # the listener is up: the run may start
    try:
        _detach(sock.fileno())
        _drop(_NOBODY)
        # Never outlive the run, even if the process-group kill that ends it were missed.
        threading.Timer(args.lifetime, os._exit, args=(0,)).start()
        asyncio.run(_serve(sock, context, args.forward))
    finally:
        os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
