"""Static rules: an AST check of a submission's source, run before anything imports it.

The checker resolves import aliases (``import torch as t`` → ``t.jit`` is ``torch.jit``),
folds constant string expressions (``"sou" + "rce_code"``), treats ``getattr(x, "name")``
like ``x.name``, and flags every dynamic way of reaching a name (``exec``, ``eval``,
``__import__``/``importlib`` or ``getattr`` with computed names, frame and namespace
introspection), so renaming and string tricks do not slip past the lists below.

Stable codes: rule.other_language, rule.cuda_graph, rule.reference_call, rule.dsl_library,
rule.inline_source, rule.dynamic_code, rule.size, rule.syntax.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from engine.grading.api import MAX_SOURCE_BYTES, Finding
from engine.grading.rules.tables import (  # the tables, re-exported
    BANNED_ATTRIBUTES,
    BANNED_KEYWORDS,
    BANNED_NAMES,
    BANNED_STRINGS,
    CUDA_GRAPH,
    DSL_LIBRARY,
    DYNAMIC_BUILTINS,
    DYNAMIC_CODE,
    GUARDED_MODULE_ROOTS,
    INLINE_SOURCE,
    NAME_LOOKUP_BUILTINS,
    OTHER_LANGUAGE,
    PROCESS_PATHS,
    REFERENCE_CALL,
    SIZE,
    SOURCE_MARKERS,
    SYNTAX,
)


def _match(dotted: str, table: dict[str, tuple[str, str]]) -> tuple[str, str, str] | None:
    """The longest banned prefix of ``dotted`` in ``table``: (prefix, code, why)."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in table:
            code, why = table[prefix]
            return prefix, code, why
    return None


def fold_str(node: ast.AST | None) -> str | None:
    """The value of a constant string expression (concatenation, f-strings, join, slices)."""
    if node is None:
        return None
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = fold_str(node.left), fold_str(node.right)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        left = fold_str(node.left)
        if left is not None and isinstance(node.right, ast.Constant):
            count = node.right.value
            if isinstance(count, int) and 0 <= count <= 16:
                return left * count
        return None
    if isinstance(node, ast.JoinedStr):
        pieces = []
        for value in node.values:
            if isinstance(value, ast.FormattedValue):
                inner = fold_str(value.value)
                if inner is None or value.format_spec is not None:
                    return None
                pieces.append(inner)
            else:
                piece = fold_str(value)
                if piece is None:
                    return None
                pieces.append(piece)
        return "".join(pieces)
    if isinstance(node, ast.Subscript):
        base = fold_str(node.value)
        sl = node.slice
        if base is not None and isinstance(sl, ast.Slice):
            bounds: list[int | None] = []
            for part in (sl.lower, sl.upper, sl.step):
                if part is None:
                    bounds.append(None)
                    continue
                bound = _const_int(part)
                if bound is None:
                    return None
                bounds.append(bound)
            return base[slice(*bounds)]
        return None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        method, owner = node.func.attr, fold_str(node.func.value)
        if owner is None:
            return None
        if method == "join" and len(node.args) == 1 and not node.keywords:
            arg = node.args[0]
            if isinstance(arg, (ast.List, ast.Tuple)):
                items = [fold_str(e) for e in arg.elts]
                if all(i is not None for i in items):
                    return owner.join(items)  # type: ignore[arg-type]
        if method in ("lower", "upper", "strip", "title", "swapcase") and not node.args:
            return getattr(owner, method)()  # type: ignore[no-any-return]
        if method == "replace" and len(node.args) == 2:
            old, new = fold_str(node.args[0]), fold_str(node.args[1])
            if old is not None and new is not None:
                return owner.replace(old, new)
    return None


def _const_int(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _const_int(node.operand)
        return -inner if inner is not None else None
    return None


class _Checker(ast.NodeVisitor):
    """Collects findings while walking the tree once; ``aliases`` maps local names to paths."""

    def __init__(self, aliases: dict[str, str], module_names: set[str], defined: set[str]):
        self.aliases = aliases
        self.module_names = module_names  # local names bound by ``import X``
        self.defined = defined  # names the submission defines itself
        self.findings: list[Finding] = []
        self._attribute_bases: set[int] = set()

    def flag(self, code: str, message: str, node: ast.AST) -> None:
        self.findings.append(Finding(code, message, getattr(node, "lineno", None)))

    def resolve(self, node: ast.AST) -> str | None:
        """The dotted path an expression refers to, through import aliases, or None."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Call) and _is_name(node.func, "getattr") and len(node.args) >= 2:
            base, name = self.resolve(node.args[0]), fold_str(node.args[1])
            return f"{base}.{name}" if base and name else None
        return None

    def check_dotted(self, dotted: str, node: ast.AST) -> None:
        hit = _match(dotted, BANNED_NAMES)
        if hit:
            prefix, code, why = hit
            self.flag(code, f"{prefix}: {why}", node)

    def check_attribute_name(self, name: str, node: ast.AST) -> None:
        if name in BANNED_ATTRIBUTES:
            code, why = BANNED_ATTRIBUTES[name]
            self.flag(code, f".{name}: {why}", node)

    def check_string(self, text: str, node: ast.AST) -> None:
        stripped = text.strip()
        if stripped.startswith(PROCESS_PATHS):
            self.flag(DYNAMIC_CODE, f"string {stripped[:40]!r}: reads process state", node)
        if stripped in BANNED_ATTRIBUTES:
            code, why = BANNED_ATTRIBUTES[stripped]
            self.flag(code, f"string {stripped!r}: {why}", node)
        if stripped in BANNED_KEYWORDS:
            code, why = BANNED_KEYWORDS[stripped]
            self.flag(code, f"string {stripped!r}: {why}", node)
        if stripped in BANNED_STRINGS:
            code, why = BANNED_STRINGS[stripped]
            self.flag(code, f"string {stripped!r}: {why}", node)
        if stripped and " " not in stripped and "." in stripped or stripped in _ROOT_NAMES:
            hit = _match(stripped, BANNED_NAMES)
            if hit:
                prefix, code, why = hit
                self.flag(code, f"string {stripped!r} names {prefix}: {why}", node)
        if any(marker in text for marker in SOURCE_MARKERS):
            self.flag(INLINE_SOURCE, "string literal holding CUDA C or PTX source", node)

    # --- visitors -------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.check_dotted(alias.name, node)
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.flag(REFERENCE_CALL, "relative imports reach outside the submission", node)
        module = node.module or ""
        for alias in node.names:
            self.check_dotted(f"{module}.{alias.name}" if module else alias.name, node)
            self.check_attribute_name(alias.name, node)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._attribute_bases.add(id(node.value))
        self.check_attribute_name(node.attr, node)
        dotted = self.resolve(node)
        if dotted:
            self.check_dotted(dotted, node)
            if dotted.startswith("cutlass.") and dotted.rsplit(".", 1)[-1] in ("ffi", "extern"):
                self.flag(INLINE_SOURCE, f"{dotted}: links external code into a CuTe kernel", node)
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            if node.id in DYNAMIC_BUILTINS and node.id not in self.defined:
                self.flag(DYNAMIC_CODE, f"{node.id}(): dynamic code or namespace access", node)
            if node.id in BANNED_ATTRIBUTES and node.id not in self.defined:
                code, why = BANNED_ATTRIBUTES[node.id]
                self.flag(code, f"{node.id}: {why}", node)
            if (
                node.id in self.module_names
                and id(node) not in self._attribute_bases
                and self.aliases.get(node.id, "").split(".")[0] in GUARDED_MODULE_ROOTS
            ):
                self.flag(
                    DYNAMIC_CODE,
                    f"the module {self.aliases[node.id]} is used as a value "
                    "(only its attributes may be used)",
                    node,
                )

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        for kw in node.keywords:
            if kw.arg in BANNED_KEYWORDS:
                code, why = BANNED_KEYWORDS[kw.arg]
                self.flag(code, f"{kw.arg}=: {why}", node)
        if isinstance(func, ast.Name) and func.id in NAME_LOOKUP_BUILTINS and len(node.args) >= 2:
            name = fold_str(node.args[1])
            if name is None:
                self.flag(DYNAMIC_CODE, f"{func.id}() with a computed attribute name", node)
            else:
                self.check_attribute_name(name, node)
                base = self.resolve(node.args[0])
                if base:
                    self.check_dotted(f"{base}.{name}", node)
                self._attribute_bases.add(id(node.args[0]))
        dotted = self.resolve(func)
        if dotted in ("importlib.import_module", "importlib.__import__") or _is_name(
            func, "__import__"
        ):
            target = fold_str(node.args[0]) if node.args else None
            if target is not None:
                self.check_dotted(target, node)
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        for key in node.keys:
            text = fold_str(key)
            if text in BANNED_KEYWORDS:
                code, why = BANNED_KEYWORDS[text]
                self.flag(code, f"{text!r} key: {why}", node)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self.check_string(node.value, node)
        elif isinstance(node.value, bytes):
            self.check_string(node.value.decode("latin-1"), node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        folded = fold_str(node)
        if folded is not None:
            self.check_string(folded, node)
        self.generic_visit(node)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        folded = fold_str(node)
        if folded is not None:
            self.check_string(folded, node)
        self.generic_visit(node)


# Bare words matched as strings only when they cannot be ordinary English in a message.
_ROOT_NAMES = {name for name in BANNED_NAMES if "." not in name} - {
    "code",
    "ast",
    "gc",
    "app",
    "engine",
    "problems",
    "storage",
    "screens",
    "warp",
    "fla",
    "dis",
    "apex",
    "builtins",
}


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _collect_aliases(tree: ast.AST) -> tuple[dict[str, str], set[str], set[str]]:
    """Import aliases (name → dotted path), names bound by ``import``, and defined names."""
    aliases: dict[str, str] = {}
    module_names: set[str] = set()
    defined: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                    module_names.add(alias.asname)
                else:
                    root = alias.name.split(".")[0]
                    aliases[root] = root
                    module_names.add(root)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name != "*":
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
    # Plain re-bindings (``t = torch``, ``cuda = torch.cuda``) until nothing changes.
    changed = True
    while changed:
        changed = False
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = node.targets[0], node.value
                if isinstance(target, ast.Name) and target.id not in aliases:
                    path = _resolve_static(value, aliases)
                    if path:
                        aliases[target.id] = path
                        changed = True
    return aliases, module_names, defined


def _resolve_static(node: ast.AST, aliases: dict[str, str]) -> str | None:
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _resolve_static(node.value, aliases)
        return f"{base}.{node.attr}" if base else None
    return None


def check_source(source: str | bytes) -> list[Finding]:
    """All static-rule findings for a submission (empty when it may be imported)."""
    raw = source.encode("utf-8", "surrogateescape") if isinstance(source, str) else source
    if len(raw) > MAX_SOURCE_BYTES:
        return [Finding(SIZE, f"source is {len(raw)} bytes; the limit is {MAX_SOURCE_BYTES}")]
    try:
        tree = ast.parse(raw, filename="submission.py")
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        return [
            Finding(
                SYNTAX,
                f"the source does not parse: {exc.__class__.__name__}: {getattr(exc, 'msg', exc)}",
                line,
            )
        ]
    aliases, module_names, defined = _collect_aliases(tree)
    checker = _Checker(aliases, module_names, defined)
    # Attribute bases must be known before names are visited: mark them in a first pass.
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            checker._attribute_bases.add(id(node.value))
    checker.visit(tree)
    return _dedupe(checker.findings)


def _dedupe(findings: Iterable[Finding]) -> list[Finding]:
    seen: set[tuple[str, str, int | None]] = set()
    out: list[Finding] = []
    for f in findings:
        key = (f.code, f.message, f.line)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return sorted(out, key=lambda f: (f.line or 0, f.code))


# When one line trips several rules, the most specific code is the reported reason.
PRIORITY = (
    REFERENCE_CALL,
    CUDA_GRAPH,
    INLINE_SOURCE,
    DSL_LIBRARY,
    OTHER_LANGUAGE,
    DYNAMIC_CODE,
    SIZE,
    SYNTAX,
)


def first_reason(findings: list[Finding]) -> str | None:
    """The reason code the verdict reports: the most specific code among the findings."""
    if not findings:
        return None
    return min(findings, key=lambda f: PRIORITY.index(f.code) if f.code in PRIORITY else 99).code
