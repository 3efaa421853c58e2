"""Real source distributions and a real package index on loopback, for the install attack tests."""

from __future__ import annotations

import functools
import io
import tarfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def make_sdist(folder: Path, name: str, version: str, before_setup: str) -> Path:
    """``<name>-<version>.tar.gz`` in ``folder``: PKG-INFO and a setup.py that runs ``before_setup`` first."""
    base = f"{name}-{version}"
    call = f"setup(name={name!r}, version={version!r}, py_modules=[])"
    setup = f"{before_setup}\nfrom setuptools import setup\n\n{call}\n"
    files = {
        f"{base}/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{base}/setup.py": setup,
    }
    path = folder / f"{base}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return path


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        return None


@contextmanager
def package_index(root: Path, sdists: list[Path]) -> Iterator[str]:
    """A PEP 503 simple index on 127.0.0.1 serving ``sdists``; yields its ``.../simple`` URL.

    Any other project is a 404, so an installer given this as an extra index finds the rest on its default.
    """
    files = root / "files"
    files.mkdir(parents=True, exist_ok=True)
    projects: dict[str, list[str]] = {}
    for sdist in sdists:
        (files / sdist.name).write_bytes(sdist.read_bytes())
        project = sdist.name.rsplit("-", 1)[0].replace("_", "-").lower()
        projects.setdefault(project, []).append(sdist.name)
    for project, names in projects.items():
        page = root / "simple" / project
        page.mkdir(parents=True, exist_ok=True)
        links = "".join(f'<a href="/files/{n}">{n}</a>\n' for n in names)
        (page / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()
