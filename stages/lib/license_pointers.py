"""License pointers and sidecar license files: where a file says its license is stated elsewhere in its tree.

A pointer is a header line naming the file that holds the notice: fmt's "For the license information refer to
format.h", Lua's "See Copyright Notice in lua.h" (and lua.h's own "See Copyright Notice at the end of this
file"), zlib's "For conditions of distribution and use, see copyright notice in zlib.h". A sidecar is a license
text whose name is not a primary license file's (fmt.license.rst beside spdlog's bundled fmt, LICENSE.fmt,
zlib.license): it states the license of the directory it sits in when that directory has no primary license
file of its own.

The phrasings are a hand-written table, like the notice table of license_match: no license library reads
pointers. A pointer is followed one hop, to a file of the same source tree found by name (`resolve`), and the
answer is only what that file states by itself (`target_answer`): its SPDX tag, a header notice, or a notice in
any of its comments (lua.h carries its notice in its last comment); for a license text, what askalono or the
notice table identifies.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from cpp_data.stages.lib.license_match import (
    LICENSE_FILE,
    classify,
    header_comments,
    identify_license_file,
    identify_text,
    match_notices,
    plain_comment_text,
)
from cpp_data.stages.lib.quality import comments, vendored_root

_TARGET = r"[\"'`<]?(?P<t>\w(?:[\w./+-]*[\w+])?)[\"'`>]?(?=[\s.,;:)]|$)"
SELF = "this file"
# (rule, pattern): the phrasings met in real trees; group `t` is the named file (SELF for the file itself)
POINTERS: tuple[tuple[str, re.Pattern], ...] = (
    ("refer_to", re.compile(r"(?:for\s+(?:the\s+)?)?licen[cs]e\s+information,?\s+(?:please\s+)?"
                            rf"(?:refer\s+to|see)\s+(?:the\s+)?(?:file\s+)?{_TARGET}", re.I)),
    ("notice_at_end", re.compile(r"see\s+(?:the\s+)?copyright\s+notice\s+at\s+the\s+end\s+of\s+(?P<t>this\s+file)",
                                 re.I)),
    ("copyright_notice_in", re.compile(rf"see\s+(?:the\s+)?copyright\s+notice\s+in\s+(?:the\s+file\s+)?{_TARGET}",
                                       re.I)),
    ("conditions_see", re.compile(r"for\s+conditions\s+of\s+distribution\s+and\s+use,?\s+see\s+(?:the\s+)?"
                                  rf"(?:copyright\s+notice|licen[cs]e)\s+in\s+(?:the\s+file\s+)?{_TARGET}", re.I)),
)
_KEYS = ("license information", "licence information", "copyright notice", "conditions of distribution")
# A license text by its name, whatever else the name holds: fmt.license.rst, LICENSE.fmt, COPYING.zlib
_SIDECAR_NAME = re.compile(r"licen[cs]e|copying|unlicense", re.I)
# Names that are code or data whatever they say (license_check.py, LicenseManager.java, licenses.json)
_CODE_EXTENSION = re.compile(r"\.(h|hh|hpp|hxx|h\+\+|c|cc|cpp|cxx|c\+\+|inl|ipp|tcc|txx|ixx|cppm|inc|py|sh|cmake|"
                             r"java|kt|js|ts|go|rs|m|mm|cs|rb|pl|php|html?|xml|json|ya?ml|toml|bzl|gn|in|am|"
                             r"png|svg|jpe?g|gif|ico)$", re.I)


def is_license_file_name(name: str) -> bool:
    """A name collect keeps as a license text: a LICENSE/COPYING name, or any other file that is not code and
    whose name says license or copying (fmt.license.rst, LICENSE.fmt, zlib.license)."""
    return bool(LICENSE_FILE.match(name)) or (bool(_SIDECAR_NAME.search(name)) and not _CODE_EXTENSION.search(name)
                                             and len(name) <= 80)


def identify_sidecar(text: str) -> tuple[str, float] | None:
    """A sidecar's license, by askalono alone (score >= 0.8): a file of any name counts only when its text is a
    license text askalono recognises, not when it merely mentions one (a README about licenses)."""
    return identify_text(text, min_score=0.8)


def find_pointer(text: str) -> tuple[str, str, str] | None:
    """(rule, the pointer's words, the named file or SELF) of the first pointer in the file's header comments."""
    head = text[:8000].lower()
    if not any(k in head for k in _KEYS):  # most files: no pointer's words at all, nothing parsed
        return None
    block = plain_comment_text(header_comments(text, 60))
    for rule, pattern in POINTERS:
        m = pattern.search(block)
        if m:
            target = SELF if rule == "notice_at_end" else m.group("t").rstrip(".")
            return rule, " ".join(m.group().split())[:120], target
    return None


def resolve(path: str, target: str, paths_by_name: dict[str, list[str]], root: str | None = None) -> str | None:
    """The path in the source tree that a pointer in the file at `path` names, or None: the file of that name in
    `path`'s own directory, else in the nearest directory above (no higher than `root`: by default the vendored
    component's, quality.vendored_root), else the only file of that name under that root (the whole tree when
    there is none).
    A name that climbs (`..`) or starts at `/` names nothing: a pointer is never followed out of the tree."""
    if target.startswith("/") or ".." in PurePosixPath(target).parts:
        return None
    name = PurePosixPath(target).name
    candidates = [c for c in paths_by_name.get(name, []) if c != path]
    if "/" in target:  # "include/zlib.h": the candidates ending with that path, if any
        candidates = [c for c in candidates if c == target or c.endswith("/" + target)] or candidates
    root = root or vendored_root(path)
    here = PurePosixPath(path).parent
    while True:
        want = name if str(here) == "." else f"{here}/{name}"
        if want in candidates:
            return want
        if str(here) in (".", "", root):
            break
        here = here.parent
    inside = [c for c in candidates if root is None or c.startswith(root + "/")]
    return inside[0] if len(inside) == 1 else None


def target_answer(target: str, text: str) -> tuple[str, float, str] | None:
    """(spdx, confidence, how) that the file at `target` states by itself, else None. A license text (by its
    name) is identified whole (askalono, then the notice table); any other file by its SPDX tag or header notice
    (never its own pointer, license file or declared license: one hop), else by a notice in any of its comments
    that names a copyright or a permission (lua.h's notice closes the file)."""
    if is_license_file_name(PurePosixPath(target).name):
        hit = identify_license_file(text)
        return (hit[0], hit[1], "license text") if hit else None
    answer = classify(text, None, None)
    if answer.source in ("spdx_tag", "header_notice", "header_text") and answer.spdx != "NOASSERTION":
        return answer.spdx, answer.confidence, answer.evidence
    for m in comments(text):
        block = m.group()
        low = block.lower()
        if len(block) > 200 and ("copyright" in low or "permission" in low):
            notice = match_notices(block)
            if notice:
                return notice[0], 0.9, f"{notice[1]} in a comment after the header"
    return None
