"""Find a submission's own key function, and how to call it, for the canonical-keys probes.

A submission that follows the kit declares ``[tool.takehome] key_function`` (a dict payload in, a key out).
One written another way still has a function that turns a request into the name of its tape; its signature
is its own: ``request_key(request)``, ``key_for(url, body)``, ``request_key(method, path, body)``,
``fingerprint(body)``. Candidates are found statically (a module-level function that computes a hash and
whose parameters look like a request); the probe script, run in the sandbox, tries the call shapes such
parameters suggest on a recorded request and keeps the first that answers the same key twice.

Some submissions never hash: the key is a canonical form compared as it is (a vcrpy matcher over
``canonical_body(body)``), or a hash of one (``tape_key(canonical_request(method, url, headers, body))``).
The canonical form carries every property the probes test (a hash of it only shortens it), so a function
named for canonicalising a request is a candidate too, after the hashing ones; a dict or list it returns is
compared as sorted JSON.
"""

from __future__ import annotations

import ast
from pathlib import Path

from grader import pysource, walk
from grader.safeio import read_bytes

__all__ = ["PROBE_SCRIPT", "candidates"]

_HASHES = {"sha1", "sha224", "sha256", "sha384", "sha512", "md5", "blake2b", "blake2s", "sha3_256", "new"}
_REQUEST_PARAMS = {"request", "req", "r", "http_request", "method", "url", "path", "body", "payload", "data"}
_NAME_HINTS = ("key", "fingerprint", "hash", "digest", "ident")
_CANONICAL_HINTS = ("canonical", "normaliz", "normalis")
_MAX_FILES = 400
_MAX_BYTES = 512_000
MAX_CANDIDATES = 5


def candidates(repo: Path) -> list[str]:
    """``module:function`` specs, most likely first (a name that says key/fingerprint/hash first)."""
    found: list[tuple[int, str]] = []
    for path in walk.own_sources(repo, max_files=_MAX_FILES):
        here = path.parent
        if here != repo and not (here / "__init__.py").is_file():
            continue  # only importable packages (the grader runs the code from the checkout root)
        module = _module_name(repo, path)
        if module is None:
            continue
        for func, hashes in _key_functions(path, repo):
            named = any(h in func.name.lower() for h in _NAME_HINTS)
            rank = (0 if named else 1) if hashes else 2
            found.append((rank, f"{module}:{func.name}"))
    return [spec for _, spec in sorted(found)][:MAX_CANDIDATES]


def _module_name(repo: Path, path: Path) -> str | None:
    parts = list(path.relative_to(repo).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    if not parts or not all(p.isidentifier() for p in parts):
        return None
    return ".".join(parts)


def _key_functions(path: Path, repo: Path) -> list[tuple[ast.FunctionDef, bool]]:
    """Module-level functions of a request that hash it, or that are named for canonicalising it
    (with whether they hash)."""
    try:  # never through a link, never a FIFO, capped (grader/safeio.py)
        tree = pysource.parse(read_bytes(path, cap=_MAX_BYTES, root=repo))
    except (OSError, SyntaxError, ValueError):
        return []
    out = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        params = [a.arg for a in node.args.posonlyargs + node.args.args]
        if not 1 <= len(params) - len(node.args.defaults) <= 4 or params[0] not in _REQUEST_PARAMS:
            continue
        if any(_is_hash_call(n) for n in ast.walk(node)):
            out.append((node, True))
        elif any(h in node.name.lower() for h in _CANONICAL_HINTS):
            out.append((node, False))
    return out


def _is_hash_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name in _HASHES


# Runs inside the sandbox with the submission importable (PYTHONPATH = repo). Prints one marked JSON line:
# the first candidate that could be called, the shape it was called with, and the two keys of every case.
PROBE_SCRIPT = r"""
import hashlib, importlib, inspect, json, sys
MARK = MARKER
specs, sample, cases = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])

def compact(body):
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))

def spaced(body):
    return json.dumps(body, ensure_ascii=False, indent=2)

def request(lib, body_text):
    mod = importlib.import_module(lib)
    return mod.Request(sample["method"], sample["url"], content=body_text.encode("utf-8"),
                       headers={"content-type": "application/json"})

def prepared(body_text):
    mod = importlib.import_module("requests")
    return mod.Request(sample["method"], sample["url"], data=body_text.encode("utf-8"),
                       headers={"content-type": "application/json"}).prepare()

SHAPES = {
    "requests.PreparedRequest": lambda b, t: (prepared(t),),
    "dict": lambda b, t: (b,),
    "bytes": lambda b, t: (t.encode("utf-8"),),
    "str": lambda b, t: (t,),
    "httpx.Request": lambda b, t: (request("httpx", t),),
    "httpx2.Request": lambda b, t: (request("httpx2", t),),
    "url, bytes": lambda b, t: (sample["url"], t.encode("utf-8")),
    "url, dict": lambda b, t: (sample["url"], b),
    "method, url, bytes": lambda b, t: (sample["method"], sample["url"], t.encode("utf-8")),
    "method, path, bytes": lambda b, t: (sample["method"], sample["path"], t.encode("utf-8")),
    "method, url, dict": lambda b, t: (sample["method"], sample["url"], b),
    "method, path, dict": lambda b, t: (sample["method"], sample["path"], b),
    "method, url, str": lambda b, t: (sample["method"], sample["url"], t),
    "method, url, headers, bytes": lambda b, t: (sample["method"], sample["url"], HEADERS, t.encode("utf-8")),
    "method, url, headers, dict": lambda b, t: (sample["method"], sample["url"], HEADERS, b),
}
HEADERS = {"content-type": "application/json"}

def shapes_for(func):
    params = [p for p in inspect.signature(func).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
    names = [p.name for p in params]
    if len(names) == 1 and names[0] in ("request", "req", "r", "http_request"):
        return ["httpx.Request", "httpx2.Request", "requests.PreparedRequest"]
    if len(names) == 1:
        return ["dict", "bytes", "str", "httpx.Request", "httpx2.Request", "requests.PreparedRequest"]
    if len(names) == 2:
        return ["url, bytes", "url, dict"]
    if len(names) == 3:
        return ["method, url, bytes", "method, path, bytes", "method, url, dict", "method, path, dict",
                "method, url, str"]
    if len(names) == 4:
        return ["method, url, headers, bytes", "method, url, headers, dict"]
    return []

def key(func, shape, body, text):
    value = func(*SHAPES[shape](body, text))
    if isinstance(value, bytes):
        value = value.hex()
    if isinstance(value, (dict, list)):  # a canonical form: equal forms are equal keys
        value = hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
    if not isinstance(value, (str, int)):
        raise TypeError("returned %s, not a key" % type(value).__name__)
    return str(value)

tried = []
for spec in specs:
    mod_name, _, attr = spec.partition(":")
    try:
        func = getattr(importlib.import_module(mod_name), attr)
        shapes = shapes_for(func)
    except BaseException as exc:
        tried.append("%s: %s" % (spec, type(exc).__name__))
        continue
    first = cases[0]["a"]
    for shape in shapes:
        try:
            one = key(func, shape, first, compact(first))
            two = key(func, shape, first, compact(first))
        except BaseException as exc:
            tried.append("%s(%s): %s" % (spec, shape, type(exc).__name__))
            continue
        if one != two:
            tried.append("%s(%s): not deterministic" % (spec, shape))
            continue
        out = []
        for case in cases:
            b_text = spaced(case["b"]) if case.get("whitespace") else compact(case["b"])
            try:
                out.append({"a": key(func, shape, case["a"], compact(case["a"])),
                            "b": key(func, shape, case["b"], b_text)})
            except BaseException as exc:
                out.append({"error": ("%s: %s" % (type(exc).__name__, exc))[:300]})
        print(MARK + json.dumps({"spec": spec, "shape": shape, "results": out}))
        sys.exit(0)
print(MARK + json.dumps({"error": "no key function could be called: " + "; ".join(tried)[:600]}))
"""
