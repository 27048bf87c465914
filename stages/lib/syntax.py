"""The tree-sitter C/C++ structure layer (docs/DESIGN.md section 6, the throughput layer), used by the structure
stage. Written here because no library maps a tree-sitter tree to these per-character arrays and spans.

For one source text (a Python str) `analyze` returns a `FileStructure`:

* spans: functions (free, methods, out-of-line `A::f`, ctors/dtors, operators, templates; signature/body split),
  class/struct/union/enum specifiers with bodies, namespaces, typedefs/using-aliases and comments, with character
  offsets into the str (tree-sitter works in UTF-8 bytes; offsets are converted through a byte->char index);
* per-character numpy arrays: `structure_ids` (uint8, the 9 categories below), `ast_depth` (int8, clamped to 127),
  `sibling_index` (int8, index among the named siblings, clamped to 63) and `ast_node_type` (int16, 0..255) of the
  deepest named node covering the character (0 for all three where no named node covers it);
* the calls made inside each function (short callee name + written qualifier), and the share of bytes inside
  ERROR nodes. Never raises on bad input: macro-heavy code just yields ERROR nodes and fewer spans.

Macros tree-sitter cannot expand are repaired where the tree shows they did damage (`_blank_misread_macros`):
export macros in class heads (`class FOO_API Name {`, which tree-sitter reads as a function), annotation and
statement macros next to an ERROR or MISSING node (`void f() const LOCK_EXCLUDED_(mu) {`, `Q_OBJECT`,
`ABSL_NAMESPACE_BEGIN`, `int JUCE_CALLTYPE f()`) are blanked to spaces and the tree re-parsed where they stood
(incrementally), so offsets do not move; the arrays and the ERROR share describe that repaired parse.
bench/structure_vs_libclang.py measures the spans against libclang.

stages/lib/name_graph.py links the calls of many files by name (`call_graph`'s docstring gives the resolution rule).

Structure precedence: spans are painted outer to inner, so the innermost span wins, and comments are painted last
(a comment inside a function body is COMMENT). FUNC_SIGNATURE runs from the function (or its `template <...>` head)
to the body, so a constructor's initializer list is signature; a class head (incl. template head and base clause)
and its closing brace are CLASS_DECL, everything inside its braces CLASS_MEMBER unless a nested span claims it;
namespace and `extern "C"` heads and braces are NAMESPACE (their interiors are painted by what they contain).
PREAMBLE applies at namespace scope only (file top level, namespaces, extern "C", #if blocks, never inside classes or
functions): includes, macro definitions, #pragma and other directive lines (incl. #if/#ifdef/#else/#endif lines),
using-declarations/directives, function prototypes and body-less class forward declarations.

ast_node_type buckets (stable across grammar versions: they depend on node type names only, never on kind ids):
0 = no named node, 1..len(COMMON_NODE_TYPES) = that fixed table, every other type name hashes (crc32) into the
remaining buckets len(COMMON_NODE_TYPES)+1..255.
"""

from __future__ import annotations

import bisect
import itertools
import re
import zlib
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import tree_sitter_cpp
from tree_sitter import Language, Node, Parser, Point, Tree

from cpp_data.schemas.generations import (
    CLASS_DECL,
    CLASS_MEMBER,
    COMMENT,
    FUNC_BODY,
    FUNC_SIGNATURE,
    NAMESPACE,
    PREAMBLE,
    TYPEDEF,
)

MAX_DEPTH, MAX_SIBLING = 127, 63
LANGUAGE = Language(tree_sitter_cpp.language())
COMMON_NODE_TYPES = (
    "ERROR translation_unit comment identifier field_identifier type_identifier namespace_identifier primitive_type "
    "number_literal string_literal string_content char_literal raw_string_literal escape_sequence concatenated_string "
    "true false null this auto sized_type_specifier type_qualifier storage_class_specifier function_definition "
    "function_declarator parameter_list parameter_declaration optional_parameter_declaration compound_statement "
    "expression_statement declaration init_declarator pointer_declarator reference_declarator array_declarator "
    "abstract_pointer_declarator abstract_reference_declarator abstract_function_declarator call_expression "
    "argument_list field_expression qualified_identifier template_function template_method template_type "
    "template_argument_list type_descriptor template_declaration template_parameter_list type_parameter_declaration "
    "binary_expression unary_expression assignment_expression update_expression conditional_expression "
    "cast_expression pointer_expression subscript_expression parenthesized_expression sizeof_expression "
    "new_expression delete_expression lambda_expression lambda_capture_specifier initializer_list condition_clause "
    "if_statement else_clause for_statement for_range_loop while_statement do_statement switch_statement "
    "case_statement break_statement continue_statement return_statement labeled_statement try_statement catch_clause "
    "throw_statement class_specifier struct_specifier union_specifier enum_specifier enumerator_list enumerator "
    "field_declaration_list field_declaration access_specifier base_class_clause field_initializer_list "
    "field_initializer friend_declaration destructor_name operator_name operator_cast namespace_definition "
    "declaration_list nested_namespace_specifier using_declaration alias_declaration type_definition "
    "linkage_specification static_assert_declaration preproc_include preproc_def preproc_function_def preproc_call "
    "preproc_if preproc_ifdef preproc_else preproc_elif preproc_defined preproc_arg preproc_params "
    "preproc_directive system_lib_string virtual_specifier explicit_function_specifier attribute_specifier "
    "attribute_declaration decltype placeholder_type_specifier trailing_return_type noexcept "
    "default_method_clause delete_method_clause pure_virtual_clause comma_expression user_defined_literal"
).split()
_FIXED_BUCKET = {name: i + 1 for i, name in enumerate(COMMON_NODE_TYPES)}


def node_type_bucket(type_name: str) -> int:
    """Bucket (1..255) of a named node type: its index in COMMON_NODE_TYPES, else a crc32 hash into the rest."""
    fixed = _FIXED_BUCKET.get(type_name)
    n = len(COMMON_NODE_TYPES)
    return fixed if fixed else n + 1 + zlib.crc32(type_name.encode()) % (255 - n)


_ERROR_KIND = 0xFFFF  # tree-sitter's builtin error symbol (kind_id of ERROR nodes)
_KIND_NAMES = [LANGUAGE.node_kind_for_id(k) or "" for k in range(LANGUAGE.node_kind_count)]
BUCKET_BY_KIND = np.zeros(_ERROR_KIND + 1, np.int16)  # kind_id -> bucket (several kind ids share one name)
BUCKET_BY_KIND[:len(_KIND_NAMES)] = [node_type_bucket(n) for n in _KIND_NAMES]
BUCKET_BY_KIND[_ERROR_KIND] = node_type_bucket("ERROR")
_COMMENT_KINDS = frozenset(k for k, n in enumerate(_KIND_NAMES) if n == "comment")
_CALL_KINDS = frozenset(k for k, n in enumerate(_KIND_NAMES) if n == "call_expression")
_IS_NAMED = [LANGUAGE.node_kind_is_named(k) for k in range(len(_KIND_NAMES))]  # indexed by kind_id, ERROR included
_IS_NAMED += [False] * (_ERROR_KIND - len(_IS_NAMED)) + [True]
_SPECIAL_KINDS = _COMMENT_KINDS | _CALL_KINDS | {_ERROR_KIND}
_CLASS_TYPES = {"class_specifier": "class", "struct_specifier": "struct", "union_specifier": "union",
                "enum_specifier": "enum"}
_PREAMBLE_TYPES = frozenset({"preproc_include", "preproc_def", "preproc_function_def", "preproc_call",
                             "using_declaration", "namespace_alias_definition"})
_PREPROC_BLOCKS = frozenset({"preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif", "preproc_elifdef"})
_WRAPPERS = frozenset({"pointer_declarator", "reference_declarator", "function_declarator", "init_declarator",
                       "parenthesized_declarator", "attributed_declarator"})
_SPACE = re.compile(r"\s+")
_SPACE_AROUND_PUNCT = re.compile(r" (?=\W)|(?<=\W) ")
_TEMPLATE_ARGS = re.compile(r"<[^<>]*>")


# Export/attribute macros between a class key and the class name (`class FOO_API Name {`, `struct
# ABSL_MUST_USE_RESULT X {`, `class GTEST_API_ Foo : public Bar {`): not knowing the macro, tree-sitter takes it for
# the class name and the real name for a declarator, so the class becomes a function_definition (or a declaration)
# whose braces are parsed as statements, and every member inside is lost. See `_blank_misread_macros`.
_SPECIFIER_KINDS = frozenset(k for k, n in enumerate(_KIND_NAMES)
                             if n in ("class_specifier", "struct_specifier", "union_specifier"))


class RepairNodes(NamedTuple):
    """What the macro repair looks at in one parse (`_repair_nodes`)."""
    specs: list[Node]     # class/struct/union specifiers whose heads may hold macros, in document order
    errors: list[Node]    # ERROR nodes (a tree with errors only)
    missing: list[Node]   # MISSING nodes (likewise)
    parent_of: dict[int, Node | None]  # Node.id of each ERROR and MISSING node -> its parent


_CLASS_KEYS = (b"class", b"struct", b"union")
# a bytes regex's word bytes
_WORD_BYTE = bytes(chr(b).isascii() and (chr(b).isalnum() or chr(b) == "_") for b in range(256))
# a key word followed by one name and then a character that ends a head of one word: no macro to find there
# (`_head_macros` needs two words before `{` or `:`), so the specifier is not looked up
_ONE_WORD_HEAD = re.compile(rb"\s+[A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)*\s*(?:[;,>)=*&{]|:(?!:))")


def _head_candidates(src: bytes) -> list[int]:
    """Offsets of the class/struct/union key words in `src` (as whole words) whose specifier `_head_macros` could
    find macros in, in ascending order. Found with bytes.find: a regex with `\\b` before the alternatives tries
    to match at every offset, several times slower."""
    out = []
    n = len(src)
    for key in _CLASS_KEYS:
        i = src.find(key)
        while i >= 0:
            j = i + len(key)
            if (i == 0 or not _WORD_BYTE[src[i - 1]]) and (j == n or not _WORD_BYTE[src[j]]) \
                    and not _ONE_WORD_HEAD.match(src, j):
                out.append(i)
            i = src.find(key, j)
    out.sort()
    return out


def _repair_nodes(src: bytes, tree: Tree) -> RepairNodes:
    """The nodes the macro repair looks at in the parse `tree` of `src`, with the parents of the ERROR and MISSING
    ones, without walking the whole tree (a whole walk cost as much as a third of the parse, for each round):

    * specifiers from their key words: every class/struct/union specifier starts with its key word, so the key
      words in the text (comments and strings included, where no specifier starts) are looked up in one forward
      sweep of a cursor (`_PathSweep`), except those of heads of one word (`struct A {`, `class T>`), where
      `_head_macros` finds nothing (most heads are of one word);
    * ERROR and MISSING nodes from a walk that enters only subtrees that hold an error (`Node.has_error`), keeping
      its path for the parents (tree-sitter finds a node's parent by walking down from the root, which would make
      thousands of errors in a deeply nested text quadratic).

    Not a tree-sitter query (`[(class_specifier) ...] @s (ERROR) @e (MISSING) @m`, which finds the same nodes, and
    tests/test_syntax.py holds this to it): the query engine looks along a node's later siblings for each child it
    visits, so a node with thousands of anonymous children makes it quadratic (a line of 64,000 `(`: the query
    takes a hundred times the parse; tree-sitter issue 1972)."""
    specs: list[Node] = []
    sweep = _PathSweep(tree)
    for s in _head_candidates(src):
        path, starts = sweep.to(s)
        k = bisect.bisect_left(starts, s)
        specs += [n for n in path[k:] if n.start_byte == s and n.kind_id in _SPECIFIER_KINDS]
    errors: list[Node] = []
    missing: list[Node] = []
    parent_of: dict[int, Node | None] = {}
    if not tree.root_node.has_error:  # ERROR and MISSING nodes only occur in trees with errors
        return RepairNodes(specs, errors, missing, parent_of)
    path = []  # the ancestors of the cursor's node
    cursor = tree.walk()
    while True:
        node = cursor.node
        if node.kind_id == _ERROR_KIND:
            errors.append(node)
            parent_of[node.id] = path[-1] if path else None
        if node.has_error:
            if cursor.goto_first_child():
                path.append(node)
                continue
            if node.is_missing:  # a MISSING node is a leaf
                missing.append(node)
                parent_of[node.id] = path[-1] if path else None
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                return RepairNodes(specs, errors, missing, parent_of)
            path.pop()


class _PathSweep:
    """A tree cursor moved forward through ascending byte offsets, keeping its path from the root: `to(s)` gives
    the nodes holding byte s, outermost first, and their start bytes (the last node may start after s, where no
    node starts at it).

    One forward sweep because tree-sitter finds a node's parent by walking down from the root: climbing through
    `Node.parent` for each offset makes a deeply nested text quadratic (16,000 unclosed `FOO_INLINE A::A() : b{x} {`
    lines)."""

    def __init__(self, tree: Tree):
        self.cursor = tree.walk()
        self.path = [self.cursor.node]  # the cursor's node and its ancestors, from the root
        self.starts = [self.path[0].start_byte]  # theirs: an ancestor never starts after its descendants

    def to(self, s: int) -> tuple[list[Node], list[int]]:
        cursor, path, starts = self.cursor, self.path, self.starts
        while len(path) > 1 and path[-1].end_byte <= s:  # past the cursor's node: to a later sibling, else up
            if cursor.goto_next_sibling():
                path[-1] = cursor.node
                starts[-1] = path[-1].start_byte
            else:
                cursor.goto_parent()
                path.pop()
                starts.pop()
        while starts[-1] <= s and cursor.goto_first_child_for_byte(s) is not None:
            path.append(cursor.node)  # down through the nodes holding byte s (the last may start after it)
            starts.append(path[-1].start_byte)
        return path, starts


_HEAD_SKIP = re.compile(rb"(?:\s+|//[^\n]*|/\*.*?\*/)*", re.S)
_HEAD_WORD = re.compile(rb"[A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)*")
_HEAD_KEYWORDS = frozenset({b"alignas", b"_Alignas", b"__declspec", b"__attribute__", b"__attribute", b"decltype"})
_VIRT_SPECIFIERS = frozenset({b"final", b"sealed"})

# Bracket groups and class heads are read only this far: a misread head or an annotation macro's arguments are
# short, and reading to the end of the text for each of them would make an unclosed group per line quadratic
# (thousands of lines of `ABC_DEF(x,` inside a function; of `class A_API B_API X` without a body, each head read
# as words to the end of the file).
_BRACKET_LIMIT = 4096
_HEAD_WORDS_MAX = 32
MAX_EDITS = 2048  # ranges edited into the tree in a round, else a fresh parse (`_blank_misread_macros`); above the
# largest round of bench/scale.py's corpora
_BRACKETS = {o: re.compile(re.escape(bytes([o])) + b"|" + re.escape(bytes([c]))) for o, c in (b"()", b"[]", b"<>")}


def _balanced(src: bytes, pos: int, open_: int, close: int, limit: int = _BRACKET_LIMIT) -> int:
    """End of the bracket group opening at src[pos], -1 if it does not close within `limit` bytes (only the
    brackets are visited: the regex finds them)."""
    depth = 0
    for m in _BRACKETS[open_].finditer(src, pos, pos + limit):
        depth += 1 if src[m.start()] == open_ else -1
        if depth == 0:
            return m.end()
    return -1


def _head_words(src: bytes, pos: int) -> tuple[list[tuple[int, int, bool, bytes]], int] | None:
    """The tokens of a class head from `pos`: words (`A::B` is one), calls (`FOO(x)`) and `[[...]]` skipped, as
    (start, end, is a call, text), and where they stop; None where the head is not one (brackets that do not
    close, words running on past any head)."""
    words: list[tuple[int, int, bool, bytes]] = []
    while True:
        pos = _HEAD_SKIP.match(src, pos).end()
        if src.startswith(b"[[", pos):
            pos = _balanced(src, pos, ord("["), ord("]"))
            if pos < 0:
                return None
            continue
        m = _HEAD_WORD.match(src, pos)
        if m is None:
            break
        if len(words) >= _HEAD_WORDS_MAX:  # words running on past any head: not one
            return None
        end = _HEAD_SKIP.match(src, m.end()).end()
        if src.startswith(b"(", end):
            end = _balanced(src, end, ord("("), ord(")"))
            if end < 0:
                return None
            words.append((m.start(), end, True, m.group()))
        else:
            words.append((m.start(), m.end(), False, m.group()))
            if src.startswith(b"<", end):  # the name of a specialization; its arguments end the head's words
                end = _balanced(src, end, ord("<"), ord(">"))
                if end < 0:
                    return None
                end = _HEAD_SKIP.match(src, end).end()
                m2 = _HEAD_WORD.match(src, end)
                if m2 is not None and m2.group() in _VIRT_SPECIFIERS:
                    end = m2.end()
                pos = _HEAD_SKIP.match(src, end).end()
                break
        pos = end
    return words, pos


def _head_macros(src: bytes, spec: Node) -> list[tuple[int, int]]:
    """Byte ranges of the macros in a class head that tree-sitter misread, [] when the head is not one.

    The head is read as tokens from the specifier's `name`: words (`A::B` is one), calls (`FOO(x)`), `[[...]]`,
    up to the first other character. It is a misread head only if that character opens a body or a base clause
    (`{`, or `:` that is not `::`) and at least two words come before it (`key A B {` and `key A B :` are not
    C++, except `class A b{...}` as a variable, which only `struct` code writes) -- the last word, less a
    trailing `final`, is the name and every word or call before it that is not a grammar keyword (`alignas`,
    `__declspec`, ...) is a macro. A `struct`/`union` head ending in `{` counts only where tree-sitter already
    made a function of it: `struct timespec ts{0, 1};` stays a variable."""
    name = spec.child_by_field_name("name")
    if spec.child_by_field_name("body") is not None or name is None or name.type != "type_identifier":
        return []
    head = _head_words(src, name.start_byte)
    if head is None:
        return []
    words, pos = head
    stop = src[pos:pos + 2]
    if not (stop[:1] == b"{" or (stop[:1] == b":" and stop != b"::")):
        return []
    while words and not words[-1][2] and words[-1][3] in _VIRT_SPECIFIERS and len(words) > 1:
        words.pop()
    if len(words) < 2 or words[-1][2]:
        return []
    key = spec.children[0].type if spec.child_count else ""
    if stop[:1] == b"{" and key != "class" and spec.parent.type != "function_definition":
        return []
    return [(s, e) for s, e, _, w in words[:-1] if w not in _HEAD_KEYWORDS]


# a macro-cased name (GTEST_LOCK_EXCLUDED_, Q_DECL_DEPRECATED, FOO) followed by its argument list
_MACRO_CALL = re.compile(rb"(?<![\w.:>~])([A-Z][A-Z0-9]*_[A-Z0-9_]*|[A-Z][A-Z0-9]{2,})[ \t]*\(")
_QUALIFIER_WORDS = (b"const", b"override", b"final", b"noexcept", b"volatile")
# a macro-cased name alone on its line (ABSL_NAMESPACE_BEGIN, Q_OBJECT), maybe with a `;` and a comment (the
# leading newline and the unambiguous spaces keep this scan of every file fast; a file's first line is not seen)
_BARE_MACRO_LINE = re.compile(rb"\n[ \t]*([A-Z][A-Z0-9_]{2,})[ \t]*(?:;[ \t]*)?(?://[^\r\n]*)?\r?(?=\n)")
# a macro-cased name with an underscore starting a line before more words (`SPDLOG_INLINE A::A(...) : b{x} {`,
# where tree-sitter takes the macro for a return type, which a constructor cannot have)
_LEADING_MACRO = re.compile(rb"\n[ \t]*([A-Z][A-Z0-9]*_[A-Z0-9_]*)[ \t]+(?=[A-Za-z_~])")
# ... and one after a parameter list or its qualifiers, before the body, `;`, `=` or an initializer list
_TRAILING_MACRO = re.compile(rb"(?:\)|\bconst|\boverride|\bnoexcept)[ \t]+([A-Z][A-Z0-9]*_[A-Z0-9_]*)(?=\s*[{;:=\r\n])")
_MACRO_ALONE = re.compile(rb"[A-Z][A-Z0-9]*_[A-Z0-9_]*(?:\s*\([^()]*\))?")
_MACRO_BEFORE = re.compile(rb"(?:.*\W)?[A-Z][A-Z0-9]*_[A-Z0-9_]*", re.S)  # a word ending in a macro-cased name


def _annotation_macros(src: bytes, tree: Tree, found: RepairNodes) -> list[tuple[int, int]]:
    """Byte ranges of macro calls (`NAME(args)`, NAME macro-cased) that broke the parse where they stand.

    Annotation and statement macros written without a `;` are not C++ to tree-sitter: `void f() const
    GTEST_LOCK_EXCLUDED_(mu) {` loses the signature, `GTEST_DISABLE_MSC_WARNINGS_PUSH_(4180)` alone on a line
    in a class swallows the members after it, a run of `DEFINE_X(a, );` lines turns hundreds of lines into ERROR.
    A call counts when it starts its line or follows a declarator's `)` or qualifier, and an ERROR or MISSING
    node lies on its lines or the line before; a call at the start of a line followed by `{` after a `;`, `{`
    or `}` (a `TEST(A, B) {` head) is left alone. A macro-cased name alone on its line (`ABSL_NAMESPACE_BEGIN`,
    which opens a namespace, or `Q_OBJECT`) counts when an ERROR or MISSING node lies on it or next to it, or
    the outermost node starting at it holds one (the macro became the type of a "definition" running on over
    whatever follows); so does one starting a line before more words (`SPDLOG_INLINE A::A() : b{x} {`, the
    macro taken for the return type a constructor cannot have) when that outermost node holds an error, and one
    after a parameter list or its qualifiers near an error (`bool empty() const SPDLOG_NOEXCEPT {`). So does an
    ERROR node that is nothing but a macro name or call, and a macro name read as a scope whose `::` is MISSING
    or followed by an ERROR (a calling convention: `int JUCE_CALLTYPE f()`)."""
    near = _error_windows(src, found)
    return sorted(set(itertools.chain(_macro_calls(src, near), _macro_lines(src, tree, near),
                                      _trailing_macros(src, near), _lone_macro_errors(src, found.errors),
                                      _macro_scopes(src, found))))


def _error_windows(src: bytes, found: RepairNodes) -> list[list[int]]:
    """Byte ranges from the line before each ERROR or MISSING node to the line after it, merged, in order."""
    near: list[list[int]] = []
    for a, b in sorted((n.start_byte, n.end_byte) for n in found.errors + found.missing):
        a = src.rfind(b"\n", 0, max(0, src.rfind(b"\n", 0, a))) + 1
        eol = src.find(b"\n", b)
        b = src.find(b"\n", eol + 1) if eol >= 0 else -1
        b = len(src) if b < 0 else b
        if near and a <= near[-1][1]:
            near[-1][1] = max(near[-1][1], b)
        else:
            near.append([a, b])
    return near


def _text_before(src: bytes, pos: int) -> tuple[int, bytes]:
    """The text before pos, right-stripped (a window: only its end is looked at), and where the window starts."""
    lo = max(0, pos - 4096)
    return lo, src[lo:pos].rstrip()


def _previous_code(src: bytes, line_start: int) -> bytes:
    """The text before a line, back to its last code token: comment and preprocessor lines skipped."""
    p = line_start
    while True:
        lo, prev = _text_before(src, p)
        last_nl = prev.rfind(b"\n") + 1
        if not prev or not prev[last_nl:].lstrip().startswith((b"#", b"//")):
            return prev
        p = lo + last_nl


def _macro_calls(src: bytes, near: list[list[int]]) -> list[tuple[int, int]]:
    """Macro calls near an error that start their line or follow a declarator's `)` or qualifier; a call at the
    start of a line followed by `{` after a `;`, `{` or `}` (a `TEST(A, B) {` head) is left alone."""
    out = []
    for m in (m for a, b in near for m in _MACRO_CALL.finditer(src, a, b)):
        start, paren = m.start(1), m.end() - 1
        end = _balanced(src, paren, ord("("), ord(")"), 2001 - (paren - start))
        if end < 0 or end - start > 2000:  # an unclosed or huge "call" is not an annotation
            continue
        line_start = src.rfind(b"\n", 0, start) + 1
        on_line = src[line_start:start].strip()
        prev = _text_before(src, start)[1]
        if on_line and not (prev.endswith((b")", b"&")) or prev.endswith(_QUALIFIER_WORDS)):
            continue
        if not on_line and src.startswith(b"{", _HEAD_SKIP.match(src, end).end()):
            prev = _previous_code(src, line_start)
            if not prev or prev.endswith((b";", b"{", b"}")):
                continue
        out.append((start, end))
    return out


def _macro_lines(src: bytes, tree: Tree, near: list[list[int]]) -> list[tuple[int, int]]:
    """A macro-cased name alone on its line, near an error or starting a node that holds one; one starting a line
    before more words when the outermost node it starts (what tree-sitter made of it) holds an error."""
    starts = [a for a, _ in near]

    def near_error(pos: int) -> bool:
        k = bisect.bisect_right(starts, pos) - 1
        return k >= 0 and pos <= near[k][1]

    lines = sorted((m.span(1), m.re is _BARE_MACRO_LINE)
                   for m in itertools.chain(_BARE_MACRO_LINE.finditer(src), _LEADING_MACRO.finditer(src)))
    return [(s, e) for ((s, e), bare), node in zip(lines, _outermost_nodes(tree, [span for span, _ in lines]))
            if (node is not None and node.has_error) or (bare and near_error(s))]


def _trailing_macros(src: bytes, near: list[list[int]]) -> list[tuple[int, int]]:
    """`bool empty() const SPDLOG_NOEXCEPT {`: a bare annotation after the parameters, near an error."""
    return [m.span(1) for a, b in near for m in _TRAILING_MACRO.finditer(src, a, b)]


def _lone_macro_errors(src: bytes, errors: list[Node]) -> list[tuple[int, int]]:
    """An ERROR that is just a macro name or call: `T& x ABSL_ATTRIBUTE_LIFETIME_BOUND)`."""
    return [(n.start_byte, n.end_byte) for n in errors if _MACRO_ALONE.fullmatch(src, n.start_byte, n.end_byte)]


def _macro_scopes(src: bytes, found: RepairNodes) -> list[tuple[int, int]]:
    """`T JUCE_CALLTYPE f()`: a macro name read as a scope whose `::` is MISSING or followed by an ERROR."""
    out = []
    for node in found.errors + found.missing:
        tail = src[max(0, node.start_byte - 128):node.start_byte].rstrip()
        tail = tail[:-2].rstrip() if tail.endswith(b"::") else tail
        if not _MACRO_BEFORE.fullmatch(tail.rsplit(None, 1)[-1] if tail else b""):
            continue
        parent = found.parent_of[node.id]
        scope = parent.child_by_field_name("scope") if parent is not None else None
        if (scope is not None and parent.type == "qualified_identifier" and scope.type == "namespace_identifier"
                and scope.end_byte <= node.start_byte
                and _MACRO_ALONE.fullmatch(src, scope.start_byte, scope.end_byte)):
            out.append((scope.start_byte, scope.end_byte))
    return out


def _outermost_nodes(tree: Tree, spans: list[tuple[int, int]]) -> list[Node | None]:
    """For each byte range (start, end), in ascending order of start: the outermost node that starts at `start`
    and spans the range, else the smallest node spanning it; what climbing from `descendant_for_byte_range` while
    the parent starts there gives, from one forward sweep (`_PathSweep`)."""
    sweep = _PathSweep(tree)
    out: list[Node | None] = []
    for s, e in spans:
        path, starts = sweep.to(s)
        # the topmost node starting at s, found by bisection (a scan of the path made deep texts quadratic again);
        # the nodes below it that start there too end no later, so it is the one that spans the range, if any
        k = bisect.bisect_left(starts, s)
        found = path[k] if k < len(path) and starts[k] == s and path[k].end_byte >= e else None
        # no node starts there (the macro inside a token or an ERROR's text): the smallest one spanning it
        out.append(found if found is not None else tree.root_node.descendant_for_byte_range(s, e))
    return out


def _blank_misread_macros(src: bytes, tree: Tree, parser: Parser, rounds: int = 4) -> Tree:
    """Re-parse with the macros that tree-sitter misread blanked to spaces, newlines kept, so every offset
    and line stays where it was: those of class heads (`_head_macros`) and, in trees with errors, annotation
    and statement macro calls (`_annotation_macros`); repeated while the new parse uncovers more (a class nested
    in a class that was misread). Only the parse sees the blanked bytes: spans, names and arrays refer to the
    real text, whose macro characters fall inside the surrounding node.

    The re-parse is incremental: the blanked ranges are edits of the first tree, so tree-sitter reuses every
    subtree the edits do not touch and parses the rest, in about half the time of fresh parses of the same texts.
    In a small share of documents tree-sitter's error recovery then settles on another tree than a fresh parse of
    the blanked text would; bench/structure_vs_libclang.py measures the spans either way
    (bench/results/structure_vs_libclang.md).

    A round of more than MAX_EDITS ranges parses the blanked text afresh instead: each edit costs tree-sitter
    time in proportion to how deep it lies, so thousands of macros in a deeply nested text would make the edits
    quadratic (16,000 nested `class A_API X {` heads)."""
    buf = None
    done: set[tuple[int, int]] = set()
    for _ in range(rounds):
        cur = src if buf is None else bytes(buf)
        found = _repair_nodes(cur, tree)
        ranges = [r for spec in found.specs for r in _head_macros(cur, spec)]
        if tree.root_node.has_error:
            ranges += [r for r in _annotation_macros(cur, tree, found) if r not in done]
        if not ranges:
            break
        done.update(ranges)
        buf = bytearray(cur)
        incremental = len(ranges) <= MAX_EDITS
        if incremental:  # the edits' points; a fresh parse needs none
            newlines = np.flatnonzero(np.frombuffer(cur, np.uint8) == 10)
        for s, e in ranges:
            buf[s:e] = re.sub(rb"[^\n]", b" ", cur[s:e])
            if incremental:
                start, end = _point(newlines, s), _point(newlines, e)  # blanking moves no byte, line or column
                tree.edit(s, e, e, start, end, end)
        tree = parser.parse(bytes(buf), tree) if incremental else parser.parse(bytes(buf))
    return tree


def _point(newlines: np.ndarray, offset: int) -> Point:
    """tree-sitter's (row, byte column) of a byte offset, from the offsets of the text's newlines."""
    row = int(np.searchsorted(newlines, offset))
    return Point(row, offset - (int(newlines[row - 1]) + 1 if row else 0))


class Span(NamedTuple):
    """A structural span; offsets are character offsets into the analyzed str (end exclusive)."""
    kind: str                # function | class | struct | union | enum | namespace | typedef | comment
    name: str                # short declared name ('f', '~A', 'operator==', '' for comments and anonymous ones)
    qualname: str            # scope chain + declarator as written, e.g. 'ns::A::f'
    scope: tuple[str, ...]   # enclosing namespaces/classes ('(anonymous)' for unnamed ones)
    start: int
    end: int
    body_start: int          # function: body start (signature = start..body_start); class/namespace: '{'; else -1
    line: int                # 1-based first line


class Call(NamedTuple):
    """A call expression inside function `spans[caller]`: callee short name and the qualifier written before it."""
    caller: int
    name: str
    qualifier: str  # 'ns::A' for ns::A::f(...), '' otherwise (member calls obj.f() included)
    offset: int     # character offset of the call


@dataclass
class FileStructure:
    spans: list[Span]
    calls: list[Call]
    structure_ids: np.ndarray  # uint8[n_chars]
    ast_depth: np.ndarray      # int8[n_chars]
    sibling_index: np.ndarray  # int8[n_chars]
    ast_node_type: np.ndarray  # int16[n_chars]
    n_bytes: int
    error_bytes: int           # bytes inside (outermost) ERROR nodes
    n_missing: int             # zero-width MISSING nodes inserted by error recovery

    @property
    def error_byte_share(self) -> float:
        return self.error_bytes / self.n_bytes if self.n_bytes else 0.0


def new_parser() -> Parser:
    return Parser(LANGUAGE)


def parse(src: bytes, parser: Parser | None = None) -> Tree:
    """The tree of a C/C++ source as this module reads it: tree-sitter's parse with the macros it misread
    blanked (`_blank_misread_macros`); the chunker (stages/lib/chunking.py) cuts on the same tree."""
    parser = parser or new_parser()
    return _blank_misread_macros(src, parser.parse(src), parser)


def _text(src: bytes, node: Node) -> str:
    """Node text with whitespace removed except where it separates two word characters."""
    raw = src[node.start_byte:node.end_byte].decode("utf-8", "replace")
    return _SPACE_AROUND_PUNCT.sub("", _SPACE.sub(" ", raw).strip())


def _declarator_name(src: bytes, decl: Node | None, no_type: bool, cls: str = "") -> tuple[str, str]:
    """(written name, short name) of a function declarator; macro-style definitions without a return type
    (`TEST(Suite, Name) {...}`) are named by their whole declarator text, except a constructor of the enclosing
    class `cls` (`struct RGB { RGB() {} };`)."""
    if decl is None:
        return "", ""
    if no_type and decl.type == "function_declarator":
        inner = decl.child_by_field_name("declarator")
        if (inner is not None and inner.type == "identifier" and _text(src, inner).isupper()
                and _text(src, inner) != cls):
            name = _text(src, decl)
            return name, name
    while decl.type in _WRAPPERS:
        inner = decl.child_by_field_name("declarator")
        if inner is None:
            named = decl.named_children
            if not named:
                break
            inner = named[0] if decl.type == "reference_declarator" else named[-1]
        decl = inner
    if decl.type == "operator_cast":  # conversion operator: 'operator bool'
        type_node = decl.child_by_field_name("type")
        name = "operator " + (_text(src, type_node) if type_node else "")
        return name, name
    short = _short_name(src, decl)
    if decl.type == "qualified_identifier":
        last = _last_name(decl)
        qual = src[decl.start_byte:last.start_byte].decode("utf-8", "replace")
        return _SPACE.sub("", qual) + short, short
    return _text(src, decl), short


def _last_name(node: Node) -> Node:
    """The innermost `name` of a (nested) qualified_identifier."""
    while node.type == "qualified_identifier" and (nxt := node.child_by_field_name("name")) is not None:
        node = nxt
    return node


def _short_name(src: bytes, node: Node) -> str:
    node = _last_name(node)
    if node.type == "operator_cast":
        type_node = node.child_by_field_name("type")
        return "operator " + (_text(src, type_node) if type_node else "")
    if node.type in ("template_function", "template_method", "template_type"):
        node = node.child_by_field_name("name") or node
    return _text(src, node)


def _callee(src: bytes, fn: Node | None) -> tuple[str, str] | None:
    """(short name, qualifier) of a call's `function` node; None for calls through expressions."""
    if fn is None:
        return None
    if fn.type == "field_expression":
        fn = fn.child_by_field_name("field")
        if fn is None:
            return None
    if fn.type == "qualified_identifier":
        last = _last_name(fn)
        qual = src[fn.start_byte:last.start_byte].decode("utf-8", "replace")
        return _short_name(src, last), _SPACE.sub("", qual).strip(":")
    if fn.type in ("identifier", "field_identifier", "template_function", "template_method", "destructor_name"):
        return _short_name(src, fn), ""
    return None


def _class_with_body(node: Node | None) -> Node | None:
    if node is not None and node.type in _CLASS_TYPES and node.child_by_field_name("body") is not None:
        return node
    return None


def _is_forward_decl(node: Node) -> bool:
    """A prototype (`int f(int);`, `A();` ...) or a body-less class declaration."""
    decl = node.child_by_field_name("declarator")
    if decl is None:
        type_node = node.child_by_field_name("type")
        return type_node is not None and type_node.type in _CLASS_TYPES
    while decl is not None and decl.type in _WRAPPERS and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator") or (decl.named_children[0] if decl.named_children else None)
    return decl is not None and decl.type == "function_declarator"


# Scope chains are bounded: a deeply nested text (generated code, or a hostile file) would otherwise give every
# span a chain as long as its depth and a qualified name to match, so memory would grow with the square of the
# depth (16,000 nested classes in one file). A chain keeps MAX_SCOPE_DEPTH names of at most MAX_SCOPE_NAME
# characters, and a qualified name at most MAX_QUALNAME characters of it before the span's own name (which is kept
# whole: error recovery can make a whole region one function's "name", and that is the span's own text, not
# repeated). The bounds lie far above the deepest chain and the longest names of bench/scale.py's corpora.
MAX_SCOPE_DEPTH, MAX_SCOPE_NAME, MAX_QUALNAME = 64, 1024, 4096


def _enter(scope: tuple[str, ...], name: str) -> tuple[str, ...]:
    """The scope inside `name`: `scope` with it appended (cut to MAX_SCOPE_NAME), or `scope` itself at
    MAX_SCOPE_DEPTH."""
    return scope + (name[:MAX_SCOPE_NAME],) if len(scope) < MAX_SCOPE_DEPTH else scope


def _qualified(scope: tuple[str, ...], name: str) -> str:
    return "::".join(scope)[:MAX_QUALNAME] + "::" + name if scope else name


class _StructureWalk:
    """The paint ranges and spans of `_structure`, and the stack of containers still to walk: each entry is
    (node, scope, at namespace scope, start of a template head owning the node or -1)."""

    def __init__(self, src: bytes, root: Node):
        self.src = src
        self.paint: list[tuple[int, int, int]] = []
        self.spans: list[Span] = []
        self.stack: list[tuple[Node, tuple[str, ...], bool, int]] = [(c, (), True, -1) for c in root.named_children]

    def function(self, node: Node, scope: tuple[str, ...], ns_level: bool, head: int) -> None:
        body = node.child_by_field_name("body")
        end = node.end_byte
        written, short = _declarator_name(self.src, node.child_by_field_name("declarator"),
                                          node.child_by_field_name("type") is None, scope[-1] if scope else "")
        body_start = body.start_byte if body is not None else end
        self.paint.append((head, body_start, FUNC_SIGNATURE))
        self.paint.append((body_start, end, FUNC_BODY))
        self.spans.append(Span("function", short, _qualified(scope, written), scope, head, end,
                               body_start if body is not None else -1, node.start_point[0] + 1))

    def template(self, node: Node, scope: tuple[str, ...], ns_level: bool, head: int) -> None:
        self.stack.extend((c, scope, ns_level, head) for c in node.named_children
                          if c.type not in ("template_parameter_list", "comment"))

    def class_(self, node: Node, scope: tuple[str, ...], ns_level: bool, head: int) -> None:
        body = node.child_by_field_name("body")
        if body is None:
            if ns_level:
                self.paint.append((head, node.end_byte, PREAMBLE))
            return
        name_node = node.child_by_field_name("name")
        name = _text(self.src, name_node) if name_node is not None else "(anonymous)"
        b0, b1 = body.start_byte, body.end_byte
        self.paint += [(head, b0 + 1, CLASS_DECL), (b0 + 1, b1 - 1, CLASS_MEMBER), (b1 - 1, b1, CLASS_DECL)]
        self.spans.append(Span(_CLASS_TYPES[node.type], _short_name(self.src, name_node) if name_node else "",
                               _qualified(scope, name), scope, head, node.end_byte, b0, node.start_point[0] + 1))
        self.stack.extend((c, _enter(scope, name), False, -1) for c in body.named_children)

    def namespace(self, node: Node, scope: tuple[str, ...], ns_level: bool, head: int) -> None:
        body = node.child_by_field_name("body")
        if body is None:
            return
        start, inner = node.start_byte, scope
        if node.type == "namespace_definition":
            name_node = node.child_by_field_name("name")
            name = _text(self.src, name_node) if name_node is not None else "(anonymous)"
            inner = _enter(scope, name)
            self.spans.append(Span("namespace", name, _qualified(scope, name), scope, start, node.end_byte,
                                   body.start_byte, node.start_point[0] + 1))
        if body.type == "declaration_list":
            self.paint += [(start, body.start_byte + 1, NAMESPACE), (body.end_byte - 1, body.end_byte, NAMESPACE)]
            self.stack.extend((c, inner, True, -1) for c in body.named_children)
        else:
            self.paint.append((start, body.start_byte, NAMESPACE))
            self.stack.append((body, inner, True, -1))

    def typedef(self, node: Node, scope: tuple[str, ...], ns_level: bool, head: int) -> None:
        self.paint.append((head, node.end_byte, TYPEDEF))
        name_node = node.child_by_field_name("declarator" if node.type == "type_definition" else "name")
        name = _text(self.src, name_node) if name_node is not None else ""
        self.spans.append(Span("typedef", name, _qualified(scope, name), scope, head, node.end_byte, -1,
                               node.start_point[0] + 1))
        if (cls := _class_with_body(node.child_by_field_name("type"))) is not None:
            self.stack.append((cls, scope, False, -1))

    def declaration(self, node: Node, scope: tuple[str, ...], ns_level: bool, head: int) -> None:
        type_node = node.child_by_field_name("type")
        owned = head if head < node.start_byte else -1
        if node.type == "friend_declaration" and node.named_children:
            type_node = node.named_children[0]
            if type_node.type == "function_definition":  # a friend function defined in its class
                self.stack.append((type_node, scope, ns_level, owned))
                return
        if (cls := _class_with_body(type_node)) is not None:
            self.stack.append((cls, scope, ns_level, owned))
        elif ns_level and _is_forward_decl(node):
            self.paint.append((head, node.end_byte, PREAMBLE))

    def preproc(self, node: Node, scope: tuple[str, ...], ns_level: bool, head: int) -> None:
        start, end = node.start_byte, node.end_byte
        if ns_level:  # the directive line and a closing '#endif'
            eol = self.src.find(b"\n", start, end)
            self.paint.append((start, eol if eol >= 0 else end, PREAMBLE))
            last = node.children[-1] if node.child_count else None
            if last is not None and last.type == "#endif":
                self.paint.append((last.start_byte, last.end_byte, PREAMBLE))
        skip = {node.child_by_field_name("condition"), node.child_by_field_name("name")}
        self.stack.extend((c, scope, ns_level, -1) for c in node.named_children if c not in skip)

    def preamble(self, node: Node, scope: tuple[str, ...], ns_level: bool, head: int) -> None:
        if ns_level:
            self.paint.append((node.start_byte, node.end_byte, PREAMBLE))

    def error(self, node: Node, scope: tuple[str, ...], ns_level: bool, head: int) -> None:
        self.stack.extend((c, scope, ns_level, -1) for c in node.named_children)


_STRUCTURE_STEPS = {"function_definition": _StructureWalk.function, "template_declaration": _StructureWalk.template,
                    **{k: _StructureWalk.class_ for k in _CLASS_TYPES},
                    "namespace_definition": _StructureWalk.namespace, "linkage_specification": _StructureWalk.namespace,
                    "type_definition": _StructureWalk.typedef, "alias_declaration": _StructureWalk.typedef,
                    **{k: _StructureWalk.declaration for k in ("declaration", "field_declaration",
                                                               "friend_declaration")},
                    **{k: _StructureWalk.preproc for k in _PREPROC_BLOCKS},
                    **{k: _StructureWalk.preamble for k in _PREAMBLE_TYPES},
                    "ERROR": _StructureWalk.error}


def _structure(src: bytes, root: Node) -> tuple[list[tuple[int, int, int]], list[Span]]:
    """Walk the declaration containers (namespaces, classes, extern "C", #if blocks, templates, ERROR nodes, never
    function bodies); return paint ranges (start byte, end byte, category) in outer-to-inner order and the spans
    (byte offsets; `analyze` converts them). Each kind of node has its step (_STRUCTURE_STEPS)."""
    walk = _StructureWalk(src, root)
    while walk.stack:
        node, scope, ns_level, head = walk.stack.pop()
        step = _STRUCTURE_STEPS.get(node.type)
        if step is not None:
            step(walk, node, scope, ns_level, node.start_byte if head < 0 else head)
    return walk.paint, walk.spans


def _event_order(pos: np.ndarray, depth: np.ndarray, n_chars: int) -> np.ndarray:
    """The order of a walk's exit events (the first len(depth) of `pos`: node ends) and entry events (the rest:
    node starts): by position, exits before entries, inner exits first, outer entries first. One stable argsort
    of a packed key (position, exit or entry, depth turned for exits) where the fields fit in 63 bits, three
    stable sorts (lexsort) otherwise: the same order, about a third of the time."""
    n = len(depth)
    if n_chars >= 1 << 22 or n >= 1 << 19:  # a depth is below the node count
        return np.lexsort((np.concatenate([-depth, depth]), np.repeat(np.array([0, 1], np.int8), n), pos))
    key = pos << 41
    key[:n] |= (1 << 20) - 1 - depth
    key[n:] |= (1 << 40) | depth
    return np.argsort(key, kind="stable")


def _tree_links(depth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(parent record or -1, index among its parent's records) of each record of a pre-order walk, from the
    records' depths alone. In pre-order a record's parent is the last record before it one level up, found for
    every record at once by one binary search over (depth, position) keys; siblings are the records sharing a
    parent, in walk order."""
    n = len(depth)
    position = np.arange(n, dtype=np.int64)
    keys = depth * (n + 1) + position  # (depth, position) order
    order = np.argsort(keys, kind="stable")
    found = np.searchsorted(keys[order], (depth - 1) * (n + 1) + position) - 1
    parent = np.where(depth > 0, order[np.maximum(found, 0)], -1)
    by_parent = np.argsort(parent, kind="stable")
    grouped = parent[by_parent]
    first = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]]) if n else position
    sibling = np.empty(n, np.int64)
    sibling[by_parent] = position - np.repeat(first, np.diff(np.r_[first, n]))
    return parent, sibling


def analyze(text: str, parser: Parser | None = None) -> FileStructure:
    """Spans, per-character arrays, calls and ERROR share of one C/C++ source text, in named steps: parse (with
    misread macros blanked), one cursor walk, the per-character node arrays, the ERROR bytes, the structure
    paint, and the calls attributed to functions."""
    src = text.encode("utf-8", "surrogatepass")
    n_chars = len(text)
    tree = parse(src, parser)
    to_char = _char_index(src, n_chars)
    rec, comments, calls, errors, n_missing = _walk(tree)
    ast_depth, sibling_index, ast_node_type = _node_arrays(rec, to_char, n_chars)
    structure_ids, spans = _paint(src, tree, comments, to_char, n_chars)
    out_calls = _attribute_calls(src, spans, calls, to_char)
    return FileStructure(spans, out_calls, structure_ids, ast_depth, sibling_index, ast_node_type, len(src),
                         _error_bytes(errors), n_missing)


def _char_index(src: bytes, n_chars: int) -> np.ndarray | None:
    """The character index of each byte offset (offsets always fall on character starts); None for ASCII."""
    if len(src) == n_chars:
        return None
    lead = (np.frombuffer(src, np.uint8) & 0xC0) != 0x80
    to_char = np.zeros(len(src) + 1, np.int64)
    np.cumsum(lead, out=to_char[1:])
    return to_char


def _chars(offsets: np.ndarray, to_char: np.ndarray | None) -> np.ndarray:
    return offsets if to_char is None else to_char[offsets]


def _walk(tree: Tree) -> tuple[np.ndarray, list[Node], list[Node], list[Node], int]:
    """One cursor walk over the tree (cheaper than materializing child lists): for every named node of non-zero
    width, a record (start byte, end byte, depth, kind id) in pre-order, with the comment, call and ERROR nodes
    met and the count of MISSING nodes. Parents and sibling indexes come from the depths afterwards, in numpy
    (_tree_links): keeping per-level stacks in the loop cost a sixth of it."""
    flat: list[int] = []  # 4 ints per record
    record = flat.extend
    comments: list[Node] = []
    calls: list[Node] = []
    errors: list[Node] = []
    n_missing = 0
    check_missing = tree.root_node.has_error  # MISSING nodes only occur in trees with errors
    depth = 0  # named non-zero-width ancestors: the only nodes the walk descends into
    cursor = tree.walk()
    while True:
        node = cursor.node
        kind = node.kind_id
        if _IS_NAMED[kind]:
            s, e = node.start_byte, node.end_byte
            if e > s:
                if kind in _SPECIAL_KINDS:
                    (comments if kind in _COMMENT_KINDS else calls if kind in _CALL_KINDS else errors).append(node)
                record((s, e, depth, kind))
                if cursor.goto_first_child():
                    depth += 1
                    continue
            elif check_missing:
                n_missing += node.is_missing
        elif check_missing:  # anonymous nodes are tokens (leaves): not descended into
            n_missing += node.is_missing
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                break
            depth -= 1
        else:
            continue
        break
    return np.fromiter(flat, np.int64, len(flat)).reshape(-1, 4), comments, calls, errors, n_missing


def _node_arrays(rec: np.ndarray, to_char: np.ndarray | None, n_chars: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ast_depth, sibling_index, ast_node_type) per character, of the deepest named node covering it: enter and
    exit events sorted by position (exits before entries, inner exits first, outer entries first); the node of
    the last event at or before a character covers it."""
    n_nodes, d = len(rec), rec[:, 2]
    parent, sibling = _tree_links(d)
    pos = _chars(np.concatenate([rec[:, 1], rec[:, 0]]), to_char)
    order = _event_order(pos, d, n_chars)
    value = np.concatenate([parent, np.arange(n_nodes)])[order]
    pos = np.concatenate([[0], pos[order], [n_chars]])
    owner = np.repeat(np.concatenate([[-1], value]), np.diff(pos))  # -1: no node (indexes the appended 0)
    ast_depth = np.append(np.minimum(d, MAX_DEPTH).astype(np.int8), np.int8(0))[owner]
    sibling_index = np.append(np.minimum(sibling, MAX_SIBLING).astype(np.int8), np.int8(0))[owner]
    ast_node_type = np.append(BUCKET_BY_KIND[rec[:, 3]], np.int16(0))[owner]
    return ast_depth, sibling_index, ast_node_type


def _error_bytes(errors: list[Node]) -> int:
    """Bytes inside ERROR nodes: the union of their ranges (nested ones are contained in their ancestors)."""
    error_bytes, covered = 0, 0
    for s, e in sorted((n.start_byte, n.end_byte) for n in errors):
        if e > covered:
            error_bytes += e - max(s, covered)
            covered = e
    return error_bytes


def _paint(src: bytes, tree: Tree, comments: list[Node], to_char: np.ndarray | None, n_chars: int
           ) -> tuple[np.ndarray, list[Span]]:
    """(structure_ids per character, spans in character offsets): the structure's paint, comments last."""
    paint, spans = _structure(src, tree.root_node)
    spans += [Span("comment", "", "", (), c.start_byte, c.end_byte, -1, c.start_point[0] + 1) for c in comments]
    if to_char is not None and (paint or spans):  # convert byte offsets to char offsets in one gather
        offs = to_char[np.array([(s, e) for s, e, _ in paint] + [(sp.start, sp.end) for sp in spans]
                                + [(max(sp.body_start, 0), 0) for sp in spans], np.int64).reshape(-1, 2)].tolist()
        paint = [(s, e, cat) for (s, e), (_, _, cat) in zip(offs, paint)]
        spans = [Span(*sp[:4], s, e, b if sp.body_start >= 0 else -1, sp.line)
                 for sp, (s, e), (b, _) in zip(spans, offs[len(paint):], offs[len(paint) + len(spans):])]
    structure_ids = np.zeros(n_chars, np.uint8)
    for s, e, cat in paint:
        structure_ids[s:e] = cat
    for sp in spans[len(spans) - len(comments):]:
        structure_ids[sp.start:sp.end] = COMMENT
    return structure_ids, spans


def _attribute_calls(src: bytes, spans: list[Span], calls: list[Node], to_char: np.ndarray | None) -> list[Call]:
    """Each call attributed to the function span containing it (function spans never overlap: bodies are not
    walked)."""
    funcs = sorted((sp.start, sp.end, i) for i, sp in enumerate(spans) if sp.kind == "function")
    if not funcs or not calls:
        return []
    fstarts = np.array([f[0] for f in funcs], np.int64)
    call_pos = _chars(np.array([c.start_byte for c in calls], np.int64), to_char)
    slot = np.searchsorted(fstarts, call_pos, side="right") - 1
    out: list[Call] = []
    for node, p, k in zip(calls, call_pos.tolist(), slot.tolist()):
        if k >= 0 and p < funcs[k][1] and (callee := _callee(src, node.child_by_field_name("function"))):
            out.append(Call(funcs[k][2], callee[0], callee[1], p))
    return out


def components(qualified: str) -> list[str]:
    """'ns::A<B::C>::f' -> ['ns', 'A', 'f'] (template arguments dropped before splitting)."""
    prev = None
    while prev != qualified:
        prev, qualified = qualified, _TEMPLATE_ARGS.sub("", qualified)
    return [c for c in qualified.split("::") if c]


CPP_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".c++", ".h", ".hh", ".hpp", ".hxx", ".inl", ".ipp", ".tpp")
