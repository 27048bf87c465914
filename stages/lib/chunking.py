"""Token-budgeted semantic chunks of one C/C++ text (docs/CHUNKS.md): what the lanes stage cuts documents into.

A chunk is a context prefix followed by a body: `text = context + body`, `body = file_text[start:end]`; the bodies
of a file, in order, concatenate to the file's text byte for byte, and `len(ids) <= budget` where `ids` is the
chunk's text encoded with the build's tokenizer (counted exactly, never estimated).

Counting without encoding every candidate. The file's ids are known (token_columns), and so is the character
where each token starts, so the tokens of `file_text[a:b]` are a difference of two bisections. A chunk's ids
are `ids(context) + file_ids[a:b]` whenever the cut at `a` is *stable*: `a` starts a pre-token of the whole
file (BPE never merges across pre-tokens), the body starts with white space (a line cut starts at `\\n`, a
token cut at a space or tab), and the context ends with printable ASCII other than `#` (no alternative of the
code pre-tokenizer continues from such a character across white space). Every chunk's text is still encoded
once at the end (`FileChunker.chunks` with its ids checked); a chunk whose ids differ from the count, or run
over the budget, is cut again shorter (`retreats` counts them).

Boundaries, best first (a lower priority wins), only at stable cuts and never inside a string, character or
raw-string literal or an `#include <...>` name:
  0   between declarations at namespace scope (file, namespace, extern "C", `#if` blocks at namespace scope)
  1   between members of a class, struct, union or enum body
  2+d between statements of a function body (d: the nesting depth of the compound statement, at most 8)
  20  any other line break outside block comments and multi-line macros
  25  a line break inside a block comment; 27 one inside a multi-line macro (after its `\\`)
  30  a space or tab between two pre-tokens, outside literals
  40  forced: the farthest token boundary that fits (only a literal longer than a chunk's room needs it)
A declaration's leading comments stay with it: the cut between two declarations is the line break that ends
the first one's last line. Line cuts are made just before a line break, so every chunk after the first starts
with `\\n`.

Greedy: from a chunk's start, the room is `budget - tokens(context)`; the chunk ends at the best priority cut
that fits the room (the farthest of that priority), ignoring cuts that would fill less than `min_fill` of the
room while another fills more. Inner cuts of a declaration are only found for declarations that cannot fit a
chunk on their own, so a file that fits costs no parse at all.

The context prefix of a chunk that starts at `s > 0`: the file's `#include` lines before `s`; then, for each
enclosing scope from the outside in, the `using` lines of that scope before `s` and the scope's opener
(`namespace a {`, `extern "C" {`, `class A : B {` with its last access specifier before `s`, a function's
signature up to its `{`). Lines are joined with `\\n`. Over `max_context` of the budget, the using lines go
first, then includes from the last, then openers from the outermost.

Hand-written: no library cuts code by a tokenizer's count at syntax boundaries (LangChain's and llama-index's
code splitters count characters and cut at regex separators; tree-sitter gives the tree, not the cuts).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np
from tokenizers import Tokenizer
from tree_sitter import Node, Parser, Query, QueryCursor

from cpp_data.stages.lib import syntax
from cpp_data.stages.lib.token_mirror import token_byte_lengths
from cpp_data.tokenizer.pretokenizer import encode_in_parts, piece_starts

PRI_DECL, PRI_MEMBER, PRI_STMT, PRI_LINE, PRI_COMMENT_LINE, PRI_MACRO_LINE, PRI_TOKEN, PRI_FORCED = \
    0, 1, 2, 20, 25, 27, 30, 40
LEVELS = {PRI_DECL: "declaration", PRI_MEMBER: "member", PRI_LINE: "line", PRI_COMMENT_LINE: "comment_line",
          PRI_MACRO_LINE: "macro_line", PRI_TOKEN: "token", PRI_FORCED: "forced"}
MIN_ROOM = 64  # the fewest tokens a chunk's body may have room for after its largest context


def level_name(priority: int) -> str:
    """The name of a cut's kind, for telemetry (every statement depth is 'statement')."""
    return LEVELS.get(priority, "statement")


_NS_CONTAINERS = {"translation_unit", "declaration_list", "preproc_if", "preproc_ifdef", "preproc_else",
                  "preproc_elif", "preproc_elifdef"}
_PREPROC_BLOCKS = ("preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif", "preproc_elifdef")
_CLASS_KINDS = {"class_specifier": "class", "struct_specifier": "struct", "union_specifier": "union",
                "enum_specifier": "enum"}
_DECLARATIONS = ("declaration", "field_declaration", "type_definition", "friend_declaration")
_USING = {"using_declaration", "namespace_alias_definition"}
_LITERALS = ("string_literal", "raw_string_literal", "char_literal", "concatenated_string", "system_lib_string")
_MACROS = ("preproc_def", "preproc_function_def", "preproc_call")
_QUERY = Query(syntax.LANGUAGE, "[" + " ".join(f"({t})" for t in _LITERALS) + "] @x (comment) @c ["
               + " ".join(f"({t})" for t in _MACROS) + "] @m")
_PRINTABLE = frozenset(chr(c) for c in range(0x21, 0x7F))


@dataclass
class Chunk:
    """One chunk: `context + body`, with body = file_text[start:end] and `ids` its exact token ids."""
    context: str
    body: str
    kind: str  # function, class, struct, namespace_part, function_part, preamble, file, ...
    name: str  # the qualified name of what it holds, '' when nothing has one
    start: int
    end: int
    ids: list[int]
    context_tokens: int
    level: str  # the kind of cut it ends at ("end" for a file's last chunk)
    context_segments: tuple[tuple[int, int], ...] = field(default=(), repr=False)  # the context as file ranges

    @property
    def text(self) -> str:
        return self.context + self.body

    def char_map(self) -> np.ndarray:
        """For each character of `text`, the file character it was: a context segment's own characters, the
        `\\n` joining two segments as the character just after the first (a white space or line break of the
        file), the body as itself. Any per-character column of the file gathered through it is the chunk's."""
        parts = []
        for k, (a, b) in enumerate(self.context_segments):
            if k:
                parts.append(np.array([self.context_segments[k - 1][1]], np.int64))
            parts.append(np.arange(a, b, dtype=np.int64))
        parts.append(np.arange(self.start, self.end, dtype=np.int64))
        return np.concatenate(parts)


@dataclass
class Scope:
    """A scope enclosing a position: what it is, its name, its span and its opener as file ranges."""
    kind: str  # namespace | linkage | class | function
    name: str
    start: int
    end: int
    body: Node
    segments: tuple[tuple[int, int], ...]


class TextOffsets:
    """A text's characters, bytes and tokens: the character of a tree-sitter byte offset, the character where
    each token starts (token_columns' rule: the character holding its first byte) and token counts between
    characters."""

    def __init__(self, text: str, ids: list[int], byte_lengths: np.ndarray):
        self.text, self.ids, self.n = text, ids, len(text)
        self.src = text.encode("utf-8", "surrogatepass")
        self.to_char: np.ndarray | None = None
        if len(self.src) != self.n:
            lead = (np.frombuffer(self.src, np.uint8) & 0xC0) != 0x80
            self.to_char = np.zeros(len(self.src) + 1, np.int64)
            np.cumsum(lead, out=self.to_char[1:])
        sizes = byte_lengths[np.asarray(ids, np.int64)] if ids else np.zeros(0, np.int64)
        if int(sizes.sum()) != len(self.src):
            raise ValueError("the token ids do not spell the text's bytes")
        byte_starts = np.cumsum(sizes) - sizes
        chars = byte_starts if self.to_char is None else self.to_char[byte_starts + 1] - 1
        self.starts: list[int] = chars.tolist()

    def c(self, byte: int) -> int:
        """The character at byte offset `byte`."""
        return byte if self.to_char is None else int(self.to_char[byte])

    def span(self, node: Node) -> tuple[int, int]:
        return self.c(node.start_byte), self.c(node.end_byte)

    def tokens_before(self, p: int) -> int:
        return bisect.bisect_left(self.starts, p)

    def start_of_token(self, k: int) -> int:
        return self.starts[k] if k < len(self.starts) else self.n


class NoCutZones:
    """Where no cut may fall (literals), and where only a poorer one may (block comments, multi-line macros):
    each as merged character intervals (a, b), a cut at a < p < b being inside."""

    def __init__(self, tree_root: Node, at: TextOffsets):
        got = QueryCursor(_QUERY).captures(tree_root)
        self.literals = _merged(got.get("x", []), at)
        self.comments = _merged(got.get("c", []), at)
        self.macros = _merged(got.get("m", []), at)

    @staticmethod
    def inside(zones: tuple[list[tuple[int, int]], list[int]], p: int) -> bool:
        spans, starts = zones
        k = bisect.bisect_right(starts, p) - 1
        return k >= 0 and spans[k][0] < p < spans[k][1]


def _merged(nodes: list[Node], at: TextOffsets) -> tuple[list[tuple[int, int]], list[int]]:
    """The nodes' character spans merged where they overlap, and their starts (for bisection). A directive's
    node holds its line break, and cutting just before it is fine, so it ends a character early."""
    spans = []
    for node in nodes:
        a, b = at.span(node)
        if b > a and at.text[b - 1] == "\n":
            b -= 1
        spans.append((a, b))
    spans.sort()
    merged: list[list[int]] = []
    for a, b in spans:
        if merged and a < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged], [m[0] for m in merged]


class StableCuts:
    """Whether a cut at a character keeps the file's ids (the module docstring's rule)."""

    def __init__(self, at: TextOffsets, zones: NoCutZones):
        self.at, self.zones = at, zones
        self._pieces: dict[int, set[int]] = {}

    def line(self, p: int, comments: bool = False, macros: bool = False) -> bool:
        """A cut just before the line break at p: stable, in no literal, in a block comment only when
        `comments`, in a multi-line macro only when `macros`."""
        text = self.at.text
        if p <= 0 or p >= self.at.n or text[p] != "\n":
            return False
        if NoCutZones.inside(self.zones.literals, p):
            return False
        if not comments and NoCutZones.inside(self.zones.comments, p):
            return False
        in_macro = NoCutZones.inside(self.zones.macros, p)
        if (in_macro or text[p - 1] == "\\") and not (macros and in_macro):
            return False
        return text[p - 1] in _PRINTABLE or self.piece_start(p)

    def token(self, p: int) -> bool:
        """A cut before the space or tab at p, between two pre-tokens and in no literal."""
        text = self.at.text
        return p < self.at.n and text[p] in " \t" and text[p - 1] != "#" \
            and not NoCutZones.inside(self.zones.literals, p) and self.piece_start(p)

    def piece_start(self, p: int) -> bool:
        """Whether character p starts a pre-token of the whole file. Pre-tokenizing restarts the same after a
        line break that follows printable ASCII (pretokenizer.encoding_parts' rule), so only the stretch
        between two such breaks around p is pre-tokenized, once."""
        r = self._restart_before(p)
        got = self._pieces.get(r)
        if got is None:
            e = self._restart_after(p)
            got = {r + a for a in piece_starts(self.at.text[r:e])} | {e}
            self._pieces[r] = got
        return p in got

    def _restart_before(self, p: int) -> int:
        text, r = self.at.text, p
        while True:
            r = text.rfind("\n", 0, r)
            if r <= 0 or text[r - 1] in _PRINTABLE:
                return max(r, 0)

    def _restart_after(self, p: int) -> int:
        text, e = self.at.text, p + 1
        while True:
            e = text.find("\n", e)
            if e < 0:
                return self.at.n
            if text[e - 1] in _PRINTABLE:
                return e
            e += 1


class StructuralCuts:
    """The cuts between declarations, members and statements (priority by position), found lazily: only
    inside units too large to fit a chunk's room on their own."""

    def __init__(self, at: TextOffsets, stable: StableCuts, room: int):
        self.at, self.stable, self.room = at, stable, room
        self.cuts: dict[int, int] = {}

    def add(self, p: int, priority: int) -> None:
        self.cuts[p] = min(self.cuts.get(p, 99), priority)

    def line_end(self, p: int, limit: int) -> int | None:
        """The first stable line cut at or after p and before `limit`."""
        while True:
            q = self.at.text.find("\n", p, limit)
            if q < 0:
                return None
            if self.stable.line(q):
                return q
            p = q + 1

    def too_large(self, a: int, b: int) -> bool:
        return self.at.tokens_before(min(b, self.at.n)) - self.at.tokens_before(a) > self.room

    def between(self, container: Node, priority: int, inner=None) -> None:
        """Cuts between the units of `container` (comments go with the unit after them), and `inner(unit)`
        for each unit too large to fit a chunk alone."""
        prev_end = None
        for unit in _units(container):
            a, b = self.at.span(unit)
            if prev_end is not None:
                cut = self.line_end(prev_end, a)
                if cut is not None:
                    self.add(cut, priority)
            prev_end = b - 1 if b > 0 and self.at.text[b - 1] == "\n" else b
            if self.too_large(a, b):
                (inner or self.descend)(unit)

    def declarations(self, container: Node) -> None:
        self.between(container, PRI_DECL)

    def descend(self, unit: Node) -> None:
        """Cuts inside a declaration too large for a chunk: a namespace's or class's members, a function's
        statements, an `#if` block's declarations."""
        t = unit.type
        body = unit.child_by_field_name("body")
        if t in ("namespace_definition", "linkage_specification") and body is not None:
            self.between(body, PRI_DECL)
        elif t in _NS_CONTAINERS or t == "ERROR":
            self.between(unit, PRI_DECL)
        elif t == "template_declaration" or t in _DECLARATIONS:
            for k in unit.named_children:
                if _holds_body(k):
                    self.descend(k)
        elif t in _CLASS_KINDS and body is not None:
            self.between(body, PRI_MEMBER)
        elif t == "function_definition" and body is not None:
            self.statements(body, 0)

    def statements(self, block: Node, depth: int) -> None:
        """Cuts between the statements of a compound statement, and one level deeper in statements too
        large for a chunk."""
        def deeper(unit: Node) -> None:
            for inner in _compound_children(unit):
                self.statements(inner, depth + 1)
        self.between(block, PRI_STMT + min(depth, 8), deeper)


def _holds_body(k: Node) -> bool:
    """A node a declaration wraps that has inner cuts: a class with a body, a function, a nested template."""
    if k.type in _CLASS_KINDS:
        return k.child_by_field_name("body") is not None
    return k.type in ("function_definition", "template_declaration", "class_specifier", "struct_specifier")


def _units(container: Node) -> list[Node]:
    return [k for k in _flat_children(container) if k.type != "comment" and k.end_byte > k.start_byte]


def _flat_children(node: Node) -> list[Node]:
    """A container's children, the children of its `#if` blocks in their place (their `#if` lines are no
    context and no unit of their own)."""
    out = []
    for k in node.named_children:
        out += _flat_children(k) if k.type in _PREPROC_BLOCKS else [k]
    return out


def _compound_children(u: Node) -> list[Node]:
    """The compound statements (and case bodies) inside statement u that no other compound statement holds."""
    out: list[Node] = []
    stack = [u]
    while stack:
        n = stack.pop()
        for k in n.named_children:
            (out if k.type in ("compound_statement", "case_statement") else stack).append(k)
    return sorted(out, key=lambda k: k.start_byte)


class Container:
    """A container's children with their character spans and its include and using lines, for the context."""

    def __init__(self, node: Node, at: TextOffsets):
        self.kids = _flat_children(node)
        self.starts = [at.c(k.start_byte) for k in self.kids]
        self.ends = [at.c(k.end_byte) for k in self.kids]
        lines = list(zip(self.kids, self.starts, self.ends))
        self.includes = [(a, a + len(at.text[a:b].rstrip())) for k, a, b in lines if k.type == "preproc_include"]
        self.usings = [(a, a + len(at.text[a:b].rstrip())) for k, a, b in lines if k.type in _USING]


class ContextBuilder:
    """The context prefix of a chunk starting at a character: includes, using lines and scope openers."""

    def __init__(self, at: TextOffsets, tree_root: Node, tok: Tokenizer):
        self.at, self.root, self.tok = at, tree_root, tok
        self._containers: dict[int, Container] = {}
        self._cache: dict[tuple, tuple[tuple[tuple[int, int], ...], list[int], list[Scope]]] = {}

    def container(self, node: Node) -> Container:
        hit = self._containers.get(node.id)
        if hit is None:
            hit = self._containers[node.id] = Container(node, self.at)
        return hit

    def scopes_at(self, p: int) -> tuple[list[Scope], list[tuple[int, int]], list[tuple[int, int, int]]]:
        """The scopes enclosing character p (outermost first), the include lines before p, and the using lines
        before p with the index of the scope they belong to (-1: the file)."""
        scopes: list[Scope] = []
        includes: list[tuple[int, int]] = []
        usings: list[tuple[int, int, int]] = []
        node: Node | None = self.root
        while node is not None:
            box = self.container(node)
            includes += [(a, b) for a, b in box.includes if b <= p + 1]
            usings += [(len(scopes) - 1, a, b) for a, b in box.usings if b <= p]
            k = bisect.bisect_left(box.starts, p) - 1  # the last child starting before p
            if k < 0 or p >= box.ends[k]:
                break
            scope = self.scope_of(box.kids[k], p)
            if scope is not None:
                scopes.append(scope)
                if scope.kind == "function":
                    break
            node = _inner_container(box.kids[k], p, self.at)
        return scopes, includes, usings

    def scope_of(self, k: Node, p: int) -> Scope | None:
        """The scope child k opens around p (its body starts before p), or None."""
        target = _declared(k)
        body = target.child_by_field_name("body")
        if body is None or self.at.c(body.start_byte) >= p:
            return None
        kind, name = _scope_kind(target, self.at)
        if kind is None or (kind == "linkage" and body.type != "declaration_list"):
            return None
        ks, body_start = self.at.c(k.start_byte), self.at.c(body.start_byte)
        segments = [(ks, body_start + 1)]
        if kind == "class":
            access = self._access_line(body, p)
            if access is not None:
                segments.append(access)
        return Scope(kind, name, ks, self.at.c(k.end_byte), body, tuple(segments))

    def _access_line(self, body: Node, p: int) -> tuple[int, int] | None:
        """The line of the last access specifier (`public:`) of a class body before p, as a file range."""
        access = None
        for c in body.named_children:
            if self.at.c(c.start_byte) >= p:
                break
            if c.type == "access_specifier":
                access = c
        if access is None:
            return None
        a = self.at.c(access.start_byte)
        line_start = self.at.text.rfind("\n", 0, a) + 1
        colon = self.at.text.find(":", self.at.c(access.end_byte))
        if colon < 0:
            return None
        return line_start, line_start + len(self.at.text[line_start:colon + 1].rstrip())

    def context(self, p: int, cap: int) -> tuple[tuple[tuple[int, int], ...], list[int], list[Scope]]:
        """(the context as file ranges, its ids, the scopes) for a chunk starting at p, within `cap` tokens."""
        if p == 0:
            return (), [], []
        scopes, includes, usings = self.scopes_at(p)
        key = (tuple((s.start, s.segments) for s in scopes), tuple(includes), tuple(usings), cap)
        hit = self._cache.get(key)
        if hit is None:
            segments, ids = self._fit(scopes, includes, usings, cap)
            hit = self._cache[key] = (segments, ids, scopes)
        return hit

    def _fit(self, scopes: list[Scope], includes: list[tuple[int, int]], usings: list[tuple[int, int, int]],
             cap: int) -> tuple[tuple[tuple[int, int], ...], list[int]]:
        """The context's segments shrunk to `cap` tokens (using lines first, then includes from the last, then
        openers from the outermost), ending in a character that keeps the join stable."""
        keep_scopes = list(range(len(scopes)))
        segments = _assemble(scopes, includes, usings, keep_scopes)
        ids = self.encode(segments)
        while len(ids) > cap and (usings or includes or keep_scopes):
            if usings:
                usings = []
            elif includes:
                includes = includes[:len(includes) // 2] if len(includes) > 8 else includes[:-1]
            else:
                keep_scopes = keep_scopes[1:]
            segments = _assemble(scopes, includes, usings, keep_scopes)
            ids = self.encode(segments)
        while segments and self.at.text[segments[-1][1] - 1] not in _PRINTABLE - {"#"}:
            a, b = segments[-1]
            segments = segments[:-1] + ([(a, b - 1)] if b - 1 > a else [])
            ids = self.encode(segments)
        return tuple(segments), ids

    def encode(self, segments: list[tuple[int, int]]) -> list[int]:
        text = self.join(segments)
        return encode_in_parts(self.tok, [text])[0] if text else []

    def join(self, segments) -> str:
        return "\n".join(self.at.text[a:b] for a, b in segments)


def _assemble(scopes: list[Scope], includes: list[tuple[int, int]], usings: list[tuple[int, int, int]],
              keep: list[int]) -> list[tuple[int, int]]:
    segments = list(includes) + [(a, b) for level, a, b in usings if level == -1]
    for i in keep:
        segments += list(scopes[i].segments) + [(a, b) for level, a, b in usings if level == i]
    return [(a, b) for a, b in segments if b > a]


def _declared(k: Node) -> Node:
    """What a template or declaration wraps that can open a scope (itself otherwise)."""
    if k.type == "template_declaration":
        inner = [c for c in k.named_children if c.type not in ("template_parameter_list", "comment")]
        return _declared(inner[-1]) if inner else k
    if k.type in _DECLARATIONS:
        for c in k.named_children:
            if (c.type in _CLASS_KINDS and c.child_by_field_name("body") is not None) \
                    or c.type == "function_definition":
                return c
    return k


def _scope_kind(target: Node, at: TextOffsets) -> tuple[str | None, str]:
    t = target.type
    if t == "namespace_definition":
        return "namespace", _field_text(target, "name", at) or "(anonymous)"
    if t == "linkage_specification":
        return "linkage", "extern"
    if t in _CLASS_KINDS:
        return "class", _field_text(target, "name", at) or "(anonymous)"
    if t == "function_definition":
        return "function", _function_name(target.child_by_field_name("declarator"), at)
    return None, ""


def _field_text(node: Node, name: str, at: TextOffsets) -> str:
    k = node.child_by_field_name(name)
    if k is None:
        return ""
    a, b = at.span(k)
    return at.text[a:b]


def _function_name(decl: Node | None, at: TextOffsets) -> str:
    while decl is not None and decl.type != "function_declarator" and decl.child_by_field_name("declarator"):
        decl = decl.child_by_field_name("declarator")
    if decl is not None and decl.type == "function_declarator":
        decl = decl.child_by_field_name("declarator")
    if decl is None:
        return ""
    a, b = at.span(decl)
    return "".join(at.text[a:b].split())[:256]


def _inner_container(k: Node, p: int, at: TextOffsets) -> Node | None:
    """The body of k that holds p, to walk into for the context."""
    if k.type == "template_declaration" or k.type in _DECLARATIONS:
        for c in k.named_children:
            a, b = at.span(c)
            wraps = k.type == "template_declaration" and c.type != "template_parameter_list"
            if a < p < b and (wraps or c.type in _CLASS_KINDS or c.type == "function_definition"):
                return _inner_container(c, p, at)
        return None
    body = k.child_by_field_name("body")
    if k.type == "function_definition":
        return body
    if k.type in ("namespace_definition", "linkage_specification") or k.type in _CLASS_KINDS:
        return body if body is not None and at.c(body.start_byte) < p < at.c(body.end_byte) else None
    return None


def _kind_name(k: Node, at: TextOffsets) -> tuple[str, str]:
    """What a top-level unit is and its name."""
    target = _declared(k)
    t = target.type
    if t == "function_definition":
        return "function", _function_name(target.child_by_field_name("declarator"), at)
    if t in _CLASS_KINDS:
        return _CLASS_KINDS[t], _field_text(target, "name", at)
    if t == "namespace_definition":
        return "namespace", _field_text(target, "name", at) or "(anonymous)"
    if t == "linkage_specification":
        return "linkage", "extern"
    if t in ("enumerator", "field_declaration_list", "access_specifier"):
        return "member", ""
    if t in _DECLARATIONS:
        return ("typedef" if t == "type_definition" else "declaration"), ""
    if t in ("preproc_include", "preproc_def", "preproc_function_def", "preproc_call", "using_declaration"):
        return "preamble", ""
    return "other", ""


class FileChunker:
    """One text with its ids: its tree (parsed only when the text does not fit a chunk) and its chunks."""

    def __init__(self, text: str, ids: list[int], tok: Tokenizer, byte_lengths: np.ndarray | None = None,
                 parser: Parser | None = None):
        self.text, self.tok, self.parser = text, tok, parser
        self.byte_lengths = byte_lengths if byte_lengths is not None else token_byte_lengths(tok)
        self.at = TextOffsets(text, ids, self.byte_lengths)
        self.retreats = 0  # chunks whose encoding differed from the count and were cut again

    def chunks(self, budget: int, max_context: float = 0.25, min_fill: float = 0.25) -> list[Chunk]:
        """The text cut into chunks of at most `budget` tokens (see the module docstring)."""
        at = self.at
        if len(at.ids) <= budget:
            return [Chunk("", self.text, "file", "", 0, at.n, list(at.ids), 0, "end")]
        cap = int(max_context * budget)
        if budget - cap < MIN_ROOM:
            raise ValueError(f"a chunk budget of {budget} tokens leaves {budget - cap} for a body after a context "
                             f"of up to {cap}; give at least {MIN_ROOM} tokens of room")
        tree = syntax.parse(at.src, self.parser)
        zones = NoCutZones(tree.root_node, at)
        self.stable = StableCuts(at, zones)
        found = StructuralCuts(at, self.stable, budget - cap)
        found.declarations(tree.root_node)
        self.cut_positions = sorted(found.cuts)
        self.cut_priorities = [found.cuts[q] for q in self.cut_positions]
        self.contexts = ContextBuilder(at, tree.root_node, self.tok)
        self.tree_root = tree.root_node
        out: list[Chunk] = []
        s = 0
        while s < at.n:
            chunk = self._next_chunk(s, budget, cap, min_fill)
            out.append(chunk)
            s = chunk.end
        return out

    def _next_chunk(self, s: int, budget: int, cap: int, min_fill: float) -> Chunk:
        """The chunk starting at s: its context, the best cut in its room, its ids checked by encoding."""
        at = self.at
        segments, ctx_ids, scopes = self.contexts.context(s, cap)
        room = budget - len(ctx_ids)
        t0 = at.tokens_before(s)
        if len(at.ids) - t0 <= room:
            q, level = at.n, "end"
        else:
            limit = at.start_of_token(t0 + room)
            q, priority = self._pick(s, limit, t0, room, min_fill)
            level = level_name(priority)
        context = self.contexts.join(segments)
        end, ids = self._encode_fitting(context, s, q, budget)
        if end <= s:
            raise ValueError(f"no body fits a chunk at character {s}")
        kind, name = self._describe(s, end, scopes)
        return Chunk(context, self.text[s:end], kind, name, s, end, ids, self._context_tokens(context, ids),
                     level if end == q else "forced", segments)

    def _context_tokens(self, context: str, ids: list[int]) -> int:
        """How many of the chunk's first tokens lie wholly in its context (the tokens that carry no loss)."""
        if not context:
            return 0
        ends = np.cumsum(self.byte_lengths[np.asarray(ids, np.int64)])
        return int(np.searchsorted(ends, len(context.encode("utf-8", "surrogatepass")), side="right"))

    def _encode_fitting(self, context: str, s: int, q: int, budget: int) -> tuple[int, list[int]]:
        """(end, ids) of the chunk [s, q) with its context, encoded; a chunk over the budget (a cut whose
        join was not stable, a forced cut) ends a token earlier until it fits."""
        at = self.at
        k = at.tokens_before(q)
        t0 = at.tokens_before(s)
        while True:
            end = at.start_of_token(k) if k < len(at.ids) else at.n
            ids = encode_in_parts(self.tok, [context + self.text[s:end]])[0]
            if len(ids) <= budget or k <= t0 + 1:
                return end, ids
            self.retreats += 1
            k -= max(1, len(ids) - budget)

    def _pick(self, s: int, limit: int, t0: int, room: int, min_fill: float) -> tuple[int, int]:
        """The cut ending a chunk that starts at s: the best priority in (s, limit], the farthest of it; cuts
        that fill less than min_fill of the room only when no cut fills more."""
        fill_at = self.at.start_of_token(min(t0 + int(min_fill * room), len(self.at.ids) - 1))
        lo = bisect.bisect_right(self.cut_positions, s)
        hi = bisect.bisect_right(self.cut_positions, limit)
        best = None
        for i in range(lo, hi):
            q, priority = self.cut_positions[i], self.cut_priorities[i]
            key = (q >= fill_at, -priority, q)
            best = key if best is None or key > best else best
        if best is not None:  # a structural cut, even below min_fill, beats any line cut
            return best[2], -best[1]
        return self._fallback(s, limit, t0, fill_at)

    def _fallback(self, s: int, limit: int, t0: int, fill_at: int) -> tuple[int, int]:
        """No structural cut fits: the farthest line cut (plain, then in a comment, then in a macro) that
        fills min_fill, else a token cut that does, else the fullest line cut, else any token cut, else a
        forced cut at the limit."""
        found = []
        for priority, comments, macros in ((PRI_LINE, False, False), (PRI_COMMENT_LINE, True, False),
                                           (PRI_MACRO_LINE, True, True)):
            r = self._last_line_cut(s, limit, comments, macros)
            if r is not None:
                if r >= fill_at:
                    return r, priority
                found.append((r, priority))
        r = next((r for r in range(limit, max(s, fill_at - 1), -1) if self.stable.token(r)), None)
        if r is not None:
            return r, PRI_TOKEN
        if found:
            return max(found, key=lambda x: (x[0], -x[1]))
        r = next((r for r in range(limit, s, -1) if self.stable.token(r)), None)
        if r is not None:
            return r, PRI_TOKEN
        return (limit if limit > s else self.at.start_of_token(t0 + 1)), PRI_FORCED

    def _last_line_cut(self, s: int, limit: int, comments: bool, macros: bool) -> int | None:
        p = limit
        while True:
            r = self.text.rfind("\n", s + 1, p)
            if r <= s:
                return None
            if self.stable.line(r, comments, macros):
                return r
            p = r

    def _describe(self, a: int, b: int, scopes: list[Scope]) -> tuple[str, str]:
        """Kind and qualified name of the chunk [a, b): a part of the innermost function holding it, else the
        largest unit of the innermost scope holding it ('<kind>_part' when the chunk holds only part of it)."""
        holding = [s for s in scopes if s.start <= a and b <= s.end]
        qual = "::".join(s.name for s in holding if s.kind in ("namespace", "class"))
        if holding and holding[-1].kind == "function":
            return "function_part", _qualify(qual, holding[-1].name)
        box = self.contexts.container(holding[-1].body if holding else self.tree_root)
        best, best_len = None, 0
        for i in range(max(bisect.bisect_right(box.starts, a) - 1, 0), bisect.bisect_left(box.starts, b)):
            overlap = min(box.ends[i], b) - max(box.starts[i], a)
            if overlap > best_len and box.kids[i].type != "comment":
                best, best_len = i, overlap
        if best is None:
            return "preamble", qual
        kind, name = _kind_name(box.kids[best], self.at)
        whole = box.starts[best] >= a and box.ends[best] <= b
        if kind not in ("preamble", "other", "declaration", "typedef") and not whole:
            kind += "_part"
        return kind, _qualify(qual, name) if name else qual


def _qualify(scope: str, name: str) -> str:
    return f"{scope}::{name}" if scope and name else name or scope
