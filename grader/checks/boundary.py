"""The transport-boundary check: one module builds network clients; agent logic does not know about tapes.

Static only (``ast``, no code run). The submission's code is every ``.py`` file outside tests, virtualenvs,
docs and build folders (a test module may build clients and import the cassette layer freely).
A client module calls what ``grader/rules/network_clients.toml`` lists: a client constructor or request
function (httpx/httpx2, requests, aiohttp, httpcore, urllib3, the provider SDKs, the standard library's
clients), a connection made by hand (``socket.create_connection``, ``asyncio.open_connection``, a
``create_connection`` or ``wrap_socket`` method on any object), a subprocess starting ``curl``/``wget``/
``nc``…, or an httpx transport, except in a module that defines a transport of its own or a cassette
module (a replay layer owns the live transport it wraps in record mode, whatever it is named); import
aliases resolved, and a method on ``importlib.import_module("x")`` read as ``x``'s.
A cassette module is named ``*cassette*`` or imports ``vcr``. An import is a statement or a call to
``importlib.import_module``/``__import__`` whose name the source spells out: a literal, ``__package__`` or
``__name__`` in an f-string or a ``+``, a relative name with its ``package`` argument; of a name the source
does not spell out whole (``f"{base}.cassette"``), the literal end counts. Entry points (``__main__.py``,
``cli.py``, ``demo.py``, ``record.py``, ``serve.py``) wire the layers together and turn a cassette miss
into exit code 2 (or HTTP 422 for a replay server), so they may import it, and so may an ``__init__.py``
that defines no function or class (a package's re-exports). Agent logic is every other module that is not
a client module, and it must not import a cassette module, nor a name another module re-exports from one
(``from .client import CassetteTransport``).
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader import pysource, walk
from grader._toml import tomllib
from grader.checks import CheckResult, Finding, register
from grader.safeio import read_bytes

if TYPE_CHECKING:
    from grader.context import Context

__all__ = ["boundary"]

_RULES = Path(__file__).resolve().parent.parent / "rules" / "network_clients.toml"


@dataclass(frozen=True)
class _ClientRules:
    calls: frozenset[str]
    methods: frozenset[str]
    transports: frozenset[str]
    run_calls: frozenset[str]
    programs: frozenset[str]


@functools.cache
def _client_rules(path: Path = _RULES) -> _ClientRules:
    """What builds a network client (``grader/rules/network_clients.toml``): lists of names per kind."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    keys = ("calls", "methods", "transports", "run_calls", "programs")
    if data.get("version") != 1 or not all(
        isinstance(data.get(k), list) and all(isinstance(v, str) for v in data[k]) for k in keys
    ):
        raise ValueError(f"{path}: expected 'version = 1' and lists of names: {', '.join(keys)}")
    return _ClientRules(*(frozenset(data[k]) for k in keys))


# Entry points wire the layers (the CLI turns a miss into exit 2; `make demo` and `make record` pick the
# mode; a replay server such as the template's serve.py turns it into HTTP 422): they may import the cassette
# layer. So may an __init__.py with no logic of its own (re-exports).
_ENTRY_POINTS = {"__main__.py", "cli.py", "demo.py", "record.py", "serve.py"}
_MAX_FILES = 2000
_MAX_BYTES = 1_000_000


@dataclass
class _Module:
    path: str  # repo-relative
    name: str  # dotted module name, best effort ("pkg.agent")
    clients: list[tuple[str, int]] = field(default_factory=list)  # (call, line)
    transports: list[tuple[str, int]] = field(default_factory=list)  # (call, line): clients unless a cassette
    bound: dict[str, str] = field(default_factory=dict)  # name an import binds -> the absolute name it binds
    # Defines a transport of its own (a class with `handle_request`): a replay layer, whatever its name,
    # which owns the live transport it wraps
    wraps_transport: bool = False
    imports: list[tuple[str, int]] = field(default_factory=list)  # (absolute dotted name, line)
    uses_vcr: bool = False
    defines: bool = False  # has a function or class of its own (a re-exporting __init__.py has none)


@register("boundary")
def boundary(ctx: Context) -> CheckResult:
    """One module builds network clients; agent logic does not know about tapes.

    Facts:
        client_modules: modules of the submission (tests excluded) that build network clients
        client_module_list: those modules as "file:line" of their first client construction
        agent_imports_cassette: agent-logic modules (not client, cassette or entry-point modules) importing
            the cassette module
        summary: one line with the counts
    """
    repo = Path(ctx.repo)
    modules, unparsable = _scan(repo)
    cassettes = {m.name for m in modules if _is_cassette(m)}
    for module in modules:
        if module.name not in cassettes and module.transports and not module.wraps_transport:
            module.clients = sorted(module.clients + module.transports, key=lambda c: c[1])
    clients = [m for m in modules if m.clients]
    cassettes |= _reexports(modules, cassettes)
    findings: list[Finding] = []
    details = [f"{m.path}:{m.clients[0][1]} builds a client ({m.clients[0][0]})" for m in clients]

    offenders = []
    for module in modules:
        if module.clients or module.name in cassettes or Path(module.path).name in _ENTRY_POINTS:
            continue
        if Path(module.path).name == "__init__.py" and not module.defines:
            continue  # a package's re-exports
        hit = next(((n, line) for n, line in module.imports if _imports_cassette(n, cassettes)), None)
        if hit is not None:
            offenders.append(module)
            where = f"{module.path}:{hit[1]}"
            message = f"agent logic imports the cassette layer ({hit[0]})"
            findings.append(Finding("transport-boundary", message, where))
            details.append(f"{where} {message}")
    if len(clients) > 1:
        for module in clients:
            where = f"{module.path}:{module.clients[0][1]}"
            findings.append(Finding("transport-boundary", "one of several modules building clients", where))
    details += [f"{path} not parsed: {why}" for path, why in unparsable]

    facts: dict[str, Any] = {
        "client_modules": len(clients),
        "client_module_list": [f"{m.path}:{m.clients[0][1]}" for m in clients],
        "agent_imports_cassette": len(offenders),
    }
    names = ", ".join(m.path for m in clients[:3]) + (", ..." if len(clients) > 3 else "")
    facts["summary"] = (
        f"{len(clients)} {'module builds' if len(clients) == 1 else 'modules build'} network clients"
        + (f" ({names})" if names else "")
        + f"; {len(offenders)} agent {'module imports' if len(offenders) == 1 else 'modules import'} "
        "the cassette layer"
    )
    return CheckResult(facts=facts, findings=findings, details=details)


def _reexports(modules: list[_Module], cassettes: set[str]) -> set[str]:
    """Names under which other modules re-export the cassette layer (red team 19, F4: an agent taking the
    cassette class as ``from .client import CassetteTransport`` imports the cassette layer all the same):
    ``pkg.client.CassetteTransport`` when ``pkg.client`` bound that name from a cassette module, through
    any chain of such re-exports."""
    found: set[str] = set()
    for _ in range(len(modules) + 1):  # each pass follows one more link of a chain
        known = cassettes | found
        more = {
            f"{m.name}.{bound}"
            for m in modules
            for bound, full in m.bound.items()
            if full != m.name and _imports_cassette(full, known) and f"{m.name}.{bound}" not in known
        }
        if not more:
            break
        found |= more
    return found


def _scan(repo: Path) -> tuple[list[_Module], list[tuple[str, str]]]:
    modules: list[_Module] = []
    unparsable: list[tuple[str, str]] = []
    for path in walk.own_sources(repo, max_files=_MAX_FILES):
        if path.name == "noxfile.py":  # the project's tooling, not its modules
            continue
        rel = path.relative_to(repo).as_posix()
        try:
            # No link, FIFO or device (a FIFO named like a module would block a plain open).
            source = read_bytes(path, cap=_MAX_BYTES + 1, root=repo, truncate=True)
            if len(source) > _MAX_BYTES:
                unparsable.append((rel, "larger than 1 MB"))
                continue
            tree = pysource.parse(source, filename=rel)
        except (SyntaxError, ValueError, OSError) as exc:
            unparsable.append((rel, f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"))
            continue
        modules.append(_analyse(rel, _module_name(repo, path), tree))
    return modules, unparsable


def _module_name(repo: Path, path: Path) -> str:
    """Dotted name: the path from the outermost package (a folder with __init__.py) down."""
    parts = [path.stem] if path.stem != "__init__" else []
    folder = path.parent
    while folder != repo and (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts) or path.parent.name


def _analyse(rel: str, name: str, tree: ast.AST) -> _Module:
    module = _Module(path=rel, name=name)
    body = tree.body if isinstance(tree, ast.Module) else []
    module.defines = any(
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for node in body
    )
    package = name if rel.endswith("__init__.py") else name.rpartition(".")[0]
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                module.imports.append((alias.name, node.lineno))
                # `import urllib.request` binds `urllib`; `import x.y as z` binds z to x.y
                bound = alias.asname or alias.name.split(".")[0]
                aliases[bound] = alias.name if alias.asname else bound
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module, node.level, package)
            for alias in node.names:
                full = f"{base}.{alias.name}" if base else alias.name
                module.imports.append((full, node.lineno))
                module.imports.append((base, node.lineno))
                aliases[alias.asname or alias.name] = full
    module.imports += _dynamic_imports(tree, aliases, package, name)
    module.bound = aliases
    module.wraps_transport = any(
        isinstance(node, ast.ClassDef)
        and any(
            isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            and f.name in ("handle_request", "handle_async_request")
            for f in node.body
        )
        for node in ast.walk(tree)
    )
    module.uses_vcr = any(n.split(".")[0] in ("vcr", "pytest_recording") for n, _ in module.imports)
    rules = _client_rules()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        resolved = _resolved_call(node.func, aliases, package, name)
        if resolved is None:
            continue
        method = resolved.rpartition(".")[2]
        if resolved in rules.calls:
            module.clients.append((resolved, node.lineno))
        elif resolved in rules.transports:
            module.transports.append((resolved, node.lineno))
        elif resolved in rules.run_calls and (program := _network_program(node, rules)) is not None:
            module.clients.append((f"{resolved} of {program}", node.lineno))
        elif isinstance(node.func, ast.Attribute) and method in rules.methods and not _server_side(node):
            module.clients.append((f"{resolved}()", node.lineno))
    module.clients.sort(key=lambda c: c[1])
    return module


def _resolved_call(func: ast.AST, aliases: dict[str, str], package: str, name: str) -> str | None:
    """The dotted name a call's function resolves to through the module's import aliases. A method called on
    ``importlib.import_module("x")`` is ``x.method`` (red team 19, F3); on any other unnamed object
    ``?.method``."""
    dotted = _dotted(func)
    if dotted is not None:
        head, _, rest = dotted.partition(".")
        return aliases.get(head, head) + (f".{rest}" if rest else "")
    if not isinstance(func, ast.Attribute):
        return None
    inner = func.value
    if isinstance(inner, ast.Call) and inner.args:
        callee = _dotted(inner.func)
        if callee is not None:
            head, _, rest = callee.partition(".")
            if aliases.get(head, head) + (f".{rest}" if rest else "") in _IMPORT_CALLS:
                target, whole = _spelled(inner.args[0], package, name)
                if whole and not target.startswith("."):
                    return f"{target}.{func.attr}"
    return f"?.{func.attr}"


def _server_side(call: ast.Call) -> bool:
    return any(
        k.arg == "server_side" and not (isinstance(k.value, ast.Constant) and not k.value.value)
        for k in call.keywords
    )


# Functions importing a module named by a string (red team 5, G8: `import_module(f"{__package__}.cassette")`).
_IMPORT_CALLS = {"importlib.import_module", "__import__"}


def _dynamic_imports(
    tree: ast.AST, aliases: dict[str, str], package: str, name: str
) -> list[tuple[str, int]]:
    """Modules imported by a call whose argument the source spells out (absolute dotted names, with line).

    A name with a part the source leaves open keeps its literal end (``f"{x}.cassette"`` -> ``cassette``):
    `_imports_cassette` matches that against the end of a cassette module's name.
    """
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        dotted = _dotted(node.func)
        if dotted is None:
            continue
        head, _, rest = dotted.partition(".")
        if aliases.get(head, head) + (f".{rest}" if rest else "") not in _IMPORT_CALLS:
            continue
        target, whole = _spelled(node.args[0], package, name)
        if not whole:
            target = target.rpartition("}")[2].lstrip(".")
        elif target.startswith("."):  # relative: to its `package` argument (second, or by keyword)
            anchor = node.args[1] if len(node.args) > 1 else None
            anchor = next((k.value for k in node.keywords if k.arg == "package"), anchor)
            base = _spelled(anchor, package, name) if anchor is not None else ("", False)
            if not base[1]:
                continue
            level = len(target) - len(target.lstrip("."))
            target = _absolute(target.lstrip(".") or None, level, base[0])
        if target:
            found.append((target, node.lineno))
    return found


def _spelled(node: ast.AST, package: str, name: str) -> tuple[str, bool]:
    """The string an expression spells, and whether whole; a part the source leaves open is written `{}`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value, True
    if isinstance(node, ast.Name):
        known = {"__package__": package, "__name__": name}.get(node.id)
        return (known, True) if known is not None else ("{}", False)
    if isinstance(node, ast.FormattedValue) and node.format_spec is None and node.conversion == -1:
        return _spelled(node.value, package, name)
    if isinstance(node, ast.JoinedStr) or (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)):
        parts = node.values if isinstance(node, ast.JoinedStr) else [node.left, node.right]
        spelled = [_spelled(p, package, name) for p in parts]
        return "".join(s for s, _ in spelled), all(w for _, w in spelled)
    return "{}", False


def _network_program(call: ast.Call, rules: _ClientRules) -> str | None:
    """The program a subprocess call starts, when it is one that talks to the network (`curl`, `wget`…):
    the first item of a literal argument list, or the first word of a command line whose start is literal."""
    if not call.args:
        return None
    first = call.args[0]
    if isinstance(first, (ast.List, ast.Tuple)) and first.elts:
        first = first.elts[0]
    while isinstance(first, ast.BinOp):  # "curl -s " + url
        first = first.left
    if isinstance(first, ast.JoinedStr) and first.values:  # f"curl -s {url}"
        first = first.values[0]
    if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
        return None
    words = first.value.split()
    program = Path(words[0]).name if words else ""
    return program if program in rules.programs else None


def _absolute(module: str | None, level: int, package: str) -> str:
    if not level:
        return module or ""
    parts = package.split(".") if package else []
    base = parts[: len(parts) - (level - 1)] if level > 1 else parts
    return ".".join([*base, *([module] if module else [])])


def _dotted(node: ast.AST) -> str | None:
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.insert(0, node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        names.insert(0, node.id)
        return ".".join(names)
    return None


def _is_cassette(module: _Module) -> bool:
    return "cassette" in module.name.rsplit(".", 1)[-1].lower() or module.uses_vcr


def _imports_cassette(name: str, cassettes: set[str]) -> bool:
    if not name:
        return False
    if name.split(".")[0] in ("vcr", "pytest_recording"):
        return True
    return any(name == c or name.startswith(c + ".") or c.endswith("." + name) for c in cassettes)
