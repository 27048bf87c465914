"""Index one translation unit with libclang: what a worker process runs.

For cursors located under the project root only (a system header's subtree is never walked: walking a whole
TU in Python costs about as much as parsing it), iteratively (deep ASTs overflow Python's recursion limit):
function and method definitions with qualified names, USRs and extents; call edges from call expressions plus
declaration and member references to functions (a `ref` is dropped where the same pair has a `call`); type
references; the include graph; each file's preamble (includes, using-declarations and directives, typedefs and
aliases, forward declarations); diagnostic counts. Callees declared outside the project (std, system) are
dropped. Results are plain dicts, so they cross the process boundary as they are.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import clang.cindex as ci

from cpp_data.clang_index.compile_db import CompileCommand, clean_args

CK = ci.CursorKind

PARSE_OPTIONS = ci.TranslationUnit.PARSE_INCOMPLETE | 0x200  # 0x200 = CXTranslationUnit_KeepGoing (past fatals)

DEF_KINDS = frozenset({CK.FUNCTION_DECL, CK.CXX_METHOD, CK.CONSTRUCTOR, CK.DESTRUCTOR, CK.FUNCTION_TEMPLATE,
                       CK.CONVERSION_FUNCTION})

CLASS_KINDS = frozenset({CK.CLASS_DECL, CK.STRUCT_DECL, CK.UNION_DECL, CK.CLASS_TEMPLATE,
                         CK.CLASS_TEMPLATE_PARTIAL_SPECIALIZATION})

NS_KINDS = frozenset({CK.NAMESPACE, CK.LINKAGE_SPEC, CK.UNEXPOSED_DECL})

SCOPE_KINDS = NS_KINDS | CLASS_KINDS

PREAMBLE_KINDS = {CK.USING_DECLARATION: "using", CK.USING_DIRECTIVE: "using_directive", CK.TYPEDEF_DECL: "typedef",
                  CK.TYPE_ALIAS_DECL: "alias", CK.TYPE_ALIAS_TEMPLATE_DECL: "alias"}

REF_KINDS = {CK.CALL_EXPR: "call", CK.DECL_REF_EXPR: "ref", CK.MEMBER_REF_EXPR: "ref"}

MAX_ERROR_MESSAGES = 5



class Walker:
    """Iterative AST walk of one TU; keeps the per-TU caches (file -> in project, USR -> qualified name)."""

    def __init__(self, root: str, tu_file: str, skip_files: frozenset[str] = frozenset()) -> None:
        self.root, self.tu_file, self.skip_files = root.rstrip("/") + "/", tu_file, skip_files
        self.walked_files: set[str] = set()
        self.skipped_files: set[str] = set()  # files of skip_files met: another TU walks them
        self.files: dict[str, tuple[str, bool]] = {}
        self.names: dict[str, str] = {}
        self.lines: dict[str, list[str]] = {}
        self.usr_in_project: dict[str, bool] = {}
        self.functions: list[dict] = []
        self.edges: dict[tuple[str, str, str], dict] = {}
        self.type_refs: dict[tuple[str, str], dict] = {}
        self.preamble: list[dict] = []

    def file_of(self, f: ci.File | None) -> tuple[str, bool]:
        """(absolute path, is under project root) of a clang File, cached by name."""
        if f is None:
            return "", False
        name = f.name
        hit = self.files.get(name)
        if hit is None:
            p = os.path.realpath(name)  # realpath: lexical ".." across /lib -> usr/lib symlinks is wrong
            hit = self.files[name] = (p, p.startswith(self.root))
        return hit

    def qualname(self, c: ci.Cursor) -> str:
        """Namespaces/classes joined with ::, cached by USR."""
        usr = c.get_usr()
        if usr and usr in self.names:
            return self.names[usr]
        parent = c.semantic_parent
        prefix = ""
        if parent is not None and parent.kind in SCOPE_KINDS | DEF_KINDS and parent.kind != CK.LINKAGE_SPEC:
            prefix = self.qualname(parent) + "::"  # depth = nesting of scopes, small
        name = prefix + (c.spelling or "(anonymous)")
        if usr:
            self.names[usr] = name
        return name

    def source_lines(self, path: str, first: int, last: int) -> str:
        if path not in self.lines:
            try:
                self.lines[path] = Path(path).read_text(errors="replace").splitlines()
            except OSError:
                self.lines[path] = []
        return "\n".join(self.lines[path][first - 1:last])

    def referenced_in_project(self, ref: ci.Cursor, usr: str) -> bool:
        hit = self.usr_in_project.get(usr)
        if hit is None:
            hit = self.usr_in_project[usr] = self.file_of(ref.location.file)[1]
        return hit

    def add_definition(self, c: ci.Cursor, path: str) -> str:
        usr = c.get_usr()
        s, e = c.extent.start, c.extent.end
        self.functions.append({"usr": usr, "name": self.qualname(c), "signature": c.displayname, "kind": c.kind.name,
                               "file": path, "start_line": s.line, "start_col": s.column, "start_offset": s.offset,
                               "end_line": e.line, "end_col": e.column, "end_offset": e.offset, "tu": self.tu_file})
        return usr

    def add_preamble(self, c: ci.Cursor, path: str, kind: str) -> None:
        s, e = c.extent.start.line, c.extent.end.line
        self.preamble.append({"file": path, "kind": kind, "name": c.spelling, "start_line": s, "end_line": e,
                              "text": self.source_lines(path, s, e)})

    def add_reference(self, c: ci.Cursor, src: str, kind: str | None) -> None:
        ref = c.referenced
        if ref is None or (ref.kind not in DEF_KINDS if kind else ref.kind == CK.NO_DECL_FOUND):
            return
        usr = ref.get_usr()
        if not usr:
            return
        if kind:  # call or ref to a function: only project-declared callees
            if self.referenced_in_project(ref, usr):
                e = self.edges.setdefault((src, usr, kind), {"src": src, "dst": usr, "kind": kind,
                                                             "dst_name": self.qualname(ref), "count": 0})
                e["count"] += 1
        elif (src, usr) not in self.type_refs:
            self.type_refs[(src, usr)] = {"src": src, "dst": usr, "dst_name": self.qualname(ref),
                                          "in_project": self.referenced_in_project(ref, usr)}

    def walk(self, tu: ci.TranslationUnit) -> None:
        """Depth-first, explicit stack of (cursor, enclosing definition USR or None, at namespace scope)."""
        stack: list[tuple[ci.Cursor, str | None, bool]] = [(c, None, True) for c in tu.cursor.get_children()]
        stack.reverse()
        while stack:
            c, encl, ns_scope = stack.pop()
            k = c.kind
            if encl is None:  # declaration context: prune everything outside the project
                path, inside = self.file_of(c.location.file)
                if not inside:
                    continue
                if path in self.skip_files:
                    self.skipped_files.add(path)
                    continue
                self.walked_files.add(path)
                if k in DEF_KINDS:
                    if not c.is_definition():
                        continue
                    encl = self.add_definition(c, path)
                elif k in CLASS_KINDS:
                    if not c.is_definition():
                        if ns_scope:
                            self.add_preamble(c, path, "forward_decl")
                        continue
                elif k in NS_KINDS:
                    pass
                else:
                    if ns_scope and k in PREAMBLE_KINDS:
                        self.add_preamble(c, path, PREAMBLE_KINDS[k])
                    continue
                ns_scope = k in NS_KINDS
            elif k in REF_KINDS:
                self.add_reference(c, encl, REF_KINDS[k])
            elif k == CK.TYPE_REF:
                self.add_reference(c, encl, None)
            elif k in DEF_KINDS and c.is_definition():  # e.g. a method of a local class
                encl = self.add_definition(c, self.file_of(c.location.file)[0])
            stack.extend((ch, encl, ns_scope) for ch in reversed(list(c.get_children())))

    def edge_rows(self) -> list[dict]:
        """Edges; a 'ref' is dropped where the same pair has a 'call' (the callee expression of the call itself)."""
        return [e for (s, d, k), e in self.edges.items() if k == "call" or (s, d, "call") not in self.edges]



def _diagnostics(tu: ci.TranslationUnit) -> dict:
    counts: dict[str, Any] = {"warnings": 0, "errors": 0, "fatals": 0, "error_messages": []}
    for d in tu.diagnostics:
        if d.severity >= ci.Diagnostic.Error:
            counts["fatals" if d.severity == ci.Diagnostic.Fatal else "errors"] += 1
            if len(counts["error_messages"]) < MAX_ERROR_MESSAGES:
                loc = d.location
                # the file as an absolute path (clang names it as it was spelled, relative to the command's
                # directory, the working directory here), so where it lies can be told (stages/semantics.py)
                where = os.path.abspath(loc.file.name) if loc.file else "?"
                counts["error_messages"].append(f"{where}:{loc.line}:{loc.column}: {d.spelling}")
        elif d.severity == ci.Diagnostic.Warning:
            counts["warnings"] += 1
    return counts



def parse_tu(cmd: CompileCommand, resource_dir: str | None,
           options: int = PARSE_OPTIONS) -> tuple[ci.TranslationUnit | None, dict]:
    """Parse from the command's directory; on a libclang load failure return (None, a 'crashed' result)."""
    os.chdir(cmd.directory)
    t0 = time.perf_counter()
    try:
        # the module cache a TU that turns modules on writes (clean_args); gone once the parse has loaded what
        # the TU imports (tests/test_clang_index.py resolves a call into a module after that)
        with tempfile.TemporaryDirectory(prefix="cpp-data-modules-") as cache:
            tu = ci.Index.create().parse(cmd.file, args=clean_args(cmd, resource_dir, cache), options=options)
    except ci.TranslationUnitLoadError as e:
        # no TU: libclang recovered from a crash inside clang (e.g. bad_alloc under the cap) or bad arguments
        return None, {"file": cmd.file, "status": "crashed", "parse_s": time.perf_counter() - t0, "walk_s": 0.0,
                      "warnings": 0, "errors": 0, "fatals": 1, "error_messages": [f"libclang: {e}"]}
    res = {"file": cmd.file, "parse_s": time.perf_counter() - t0, "walk_s": 0.0, **_diagnostics(tu)}
    res["status"] = "errors" if res["errors"] or res["fatals"] else "ok"
    # a module's diagnostics name its cache, a new temporary directory each time: not part of the output
    res["error_messages"] = [m.replace(cache, "<module-cache>") for m in res["error_messages"]]
    return tu, res



def bare_parse(cmd: CompileCommand, project_root: str | Path, resource_dir: str | None = None) -> dict:
    """Parse only (same arguments and options as `index_tu`, no walk): the baseline for the indexing overhead."""
    tu, res = parse_tu(cmd, resource_dir)
    if tu is not None:
        res["source_bytes"] = os.path.getsize(cmd.file)
    return res



def index_tu(cmd: CompileCommand, project_root: str | Path, resource_dir: str | None = None,
             skip_files: frozenset[str] = frozenset()) -> dict:
    """Parse and index one TU (meant to run in a worker process: it chdirs to cmd.directory). Plain dicts/lists.
    Declarations located in `skip_files` (files another TU walks, clang_index/selection.py) are not walked;
    the result lists those it met (`skipped_files`)."""
    root = os.path.realpath(project_root)  # before parse_tu's chdir: a relative root is relative to the caller
    tu, res = parse_tu(cmd, resource_dir)
    res.update(functions=[], edges=[], type_refs=[], includes=[], preamble=[], source_bytes=0, header_bytes=0)
    if tu is None:
        return res
    t0 = time.perf_counter()
    w = Walker(root, cmd.file, skip_files)
    w.walk(tu)
    headers: set[str] = set()
    for inc in tu.get_includes():
        src, src_in = w.file_of(inc.source)
        dst, dst_in = w.file_of(inc.include)
        headers.add(dst)
        if src_in:
            text = w.source_lines(src, inc.location.line, inc.location.line)
            res["includes"].append({"includer": src, "included": dst, "depth": inc.depth, "line": inc.location.line,
                                    "system": not dst_in, "angled": "<" in text.split("include", 1)[-1][:3]})
            w.preamble.append({"file": src, "kind": "include", "name": os.path.basename(dst),
                               "start_line": inc.location.line, "end_line": inc.location.line, "text": text})
    res.update(functions=w.functions, edges=w.edge_rows(), type_refs=list(w.type_refs.values()), preamble=w.preamble,
               source_bytes=os.path.getsize(cmd.file),
               header_bytes=sum(os.path.getsize(h) for h in headers if os.path.isfile(h)),
               walked_files=sorted(w.walked_files), skipped_files=sorted(w.skipped_files),
               walk_s=time.perf_counter() - t0,
               reads=sorted({os.path.realpath(cmd.file)} | {h for h in headers if h}))  # what the TU cache keys on
    return res

