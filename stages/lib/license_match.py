"""The license cascade of docs/DESIGN.md section 4, as pure functions.

1. `SPDX-License-Identifier:` at the start of a comment line in the first 200 lines, parsed and validated by
   license-expression (WITH kept; `LicenseRef-` keys kept as written).
2. The file's header: standard license notices (short notices such as Boost's "Distributed under the Boost
   Software License" are not license texts, and askalono scores them as nonsense), then askalono on long
   header comments that name no notice (full license texts pasted into headers).
3. The nearest LICENSE/COPYING file above the file (identified with askalono), recorded as inherited.
4. The license the sources file declares for the source, recorded as declared.
Otherwise `NOASSERTION`. Each answer carries license_spdx, license_source and a confidence.

The notice table is hand-written: the kept matchers either need whole texts (askalono) or cost seconds per
file and hundreds of MB (scancode); the table covers the notices of the licenses on the default allow-list plus
the GPL family (AGPL, and GPL/LGPL notices that name no version), the other copyleft and source-available
licenses a C++ header names (MPL, EPL, CDDL, EUPL, SSPL, BUSL) and EULA markers, which the refusal rules need.
An SPDX tag no list knows is not passed over for the repository's license (`classify`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from license_expression import ExpressionError, LicenseSymbol, LicenseWithExceptionSymbol, get_spdx_licensing

from cpp_data.stages.lib.quality import comments

# The tag at the start of a comment line (`// SPDX-...`, ` * SPDX-...`, `/* SPDX-... */`, a bare line inside a block
# comment), not inside code: a licensing tool's `printf("SPDX-License-Identifier: %s", ...)` tags nothing.
_SPDX_TAG = re.compile(r"^[ \t]*(?:(?://+|/\*+)[!<]?|\*+|#)?[ \t]*"
                       r"SPDX-License-Identifier:[ \t]*([^\n*]+?)\s*(?:\*/|-->|$)", re.MULTILINE)
_LINE_DECORATION = re.compile(r"^[ \t]*(?:[/*#!|]+[ \t]?)?", re.M)
# A line naming who holds the copyright or wrote the file, which varies per file. Not a license's own lines that
# start with the word: ISC's "copyright notice and this permission notice appear in all copies" (without it
# askalono reads ISC as 0BSD) or MIT's "AUTHORS OR COPYRIGHT HOLDERS BE LIABLE".
_COPYRIGHT_LINE = re.compile(r"^\s*(copyright\s*(\(c\)|©|\d|by\b|:)|\(c\)|©|all rights reserved|authors?\s*:"
                             r"|written by).*$", re.I | re.M)
_RULES = re.compile(r"[=\-_*/#|~]{3,}")
LICENSE_FILE = re.compile(r"^(licen[cs]e|copying|unlicense)([-._][\w.-]*)?$", re.I)

COPYLEFT_PREFIXES = ("GPL-", "AGPL-", "LGPL-", "MPL-", "EPL-", "CDDL-", "EUPL-", "OSL-", "CECILL")
WEAK_COPYLEFT_PREFIXES = ("LGPL-", "MPL-", "EPL-", "CDDL-", "EUPL-")

# What follows LICENSE/COPYING/LICENCE in the name of a *primary* license file: nothing, a text extension, or
# the name of a license (LICENSE-MIT, COPYING.LESSER). Anything else names a component or an exception
# (LICENSE.OpenSSL, LICENSE-THIRD-PARTY, COPYING.RUNTIME) and never decides a directory's license.
_PRIMARY_SUFFIX = re.compile(
    r"^(|txt|md|rst|lesser|lib|unlicense|v?\d+([._]\d+)*|"
    r"((a|l)?gpl|mit|apache|bsd|boost|bsl|mpl|epl|isc|zlib|cc0|cddl|eupl)([-._]?v?[\d.]+)?"
    r"([-._](clause|only|or[-._]later))?)$", re.I)
_TEXT_EXTENSION = re.compile(r"\.(txt|md|rst)$", re.I)
# A license text that offers a choice between licenses
_CHOICE = re.compile(r"dual[- ]licen[cs]|licen[cs]ed under (the terms of )?either|multi[- ]licen[cs]ed|"
                     r"(select|choose),? at your (own )?option,? one of|terms of either\b|"
                     r"alternatively,? (this file|you) may (be used|use it|use this)", re.I)
# A line whose SPDX tag is followed by " OR " on that line. Only each line's first tag is tried (atomic group):
# searched from every tag of a line repeating them, the pattern is quadratic in the line's length.
_SPDX_OR = re.compile(r"^(?>[^\n]*?SPDX-License-Identifier:)[^\n]* OR ", re.M)
_AT_OPTION = re.compile(r"at your (own )?(option|choice|discretion)", re.I)
# `_*option`: libstdc++ renames identifiers to reserved ones across its headers, its license notices' words
# too ("or (at your __option) any later version" in bits/fs_ops.h), which must not read as GPL-3.0-only
_LATER = re.compile(r"or\s*\(?\s*at your (own )?_*option\s*\)?\s*any later version|or any later version|"
                    r"\bGPL\s*v?[23](\.0)?\s*\+|\bv?[23](\.[01])? or later\b", re.I)


def is_primary_license_file(name: str) -> bool:
    """LICENSE, COPYING.txt, LICENSE-MIT, COPYING.LESSER, UNLICENSE: a file stating the directory's own
    license(s), as opposed to a third-party component's (LICENSE.OpenSSL, LICENSE-THIRD-PARTY) or an
    exception's (COPYING.RUNTIME). NOTICE files are never license files."""
    m = LICENSE_FILE.match(name)
    if not m:
        return False
    suffix = _TEXT_EXTENSION.sub("", (m.group(2) or "")).lstrip("-._")
    return bool(_PRIMARY_SUFFIX.match(suffix))


def offers_choice(text: str) -> bool:
    """Whether a license file's text lets the licensee choose between licenses ("at your option", "dual
    licensed", an SPDX OR): only then do several license files of one directory combine with OR."""
    if _CHOICE.search(text) or _SPDX_OR.search(text):
        return True
    for m in _AT_OPTION.finditer(text):  # "... under either X or Y, at your option": not "any later version"
        near = text[max(0, m.start() - 200):m.end() + 200].lower()
        if "either" in near and "licen" in near and "later version" not in near:
            return True
    return False


@dataclass(frozen=True)
class LicenseAnswer:
    spdx: str  # SPDX expression, or NOASSERTION
    source: str  # spdx_tag | header_notice | header_text | pointer | repo_file | declared | unknown
    confidence: float
    evidence: str = ""  # rule name or file that decided it


@dataclass(frozen=True)
class _Notice:
    name: str
    pattern: re.Pattern
    expression: str
    # Lower-case literals of the pattern, one of which every match holds (a pattern's alternatives may need
    # different ones). In an ASCII header a pattern is searched only when one of them occurs: searching every
    # header with every case-insensitive pattern would be most of the license stage's CPU time, and most
    # headers hold none of a notice's words. A header with other characters is searched with every pattern
    # (re.I matches some of them to ASCII letters: the Kelvin sign to k).
    keys: tuple[str, ...]
    # Expression prefixes that make this notice redundant when another notice of the header gives one: the
    # BSD-2 pattern is the start of every BSD-3 text, and "GNU General Public License" without a version is
    # also said by every versioned GPL notice ("You should have received a copy of the GNU General Public
    # License").
    unless: tuple[str, ...] = ()

    def may_match(self, lowered_ascii: str | None) -> bool:
        """False only when the pattern cannot match: `lowered_ascii` (the lowered header, None when it is not
        ASCII) holds none of the keys."""
        return lowered_ascii is None or any(k in lowered_ascii for k in self.keys)


def _n(name: str, keys: tuple[str, ...], pattern: str, expression: str, unless: tuple[str, ...] = ()) -> _Notice:
    return _Notice(name, re.compile(pattern, re.I | re.S), expression, keys, unless)


_GPL = ("gnu general public license", "gpl")
_LGPL = ("gnu lesser general public license",)
_BSD = ("redistribution and use in source and binary forms",)

NOTICES: tuple[_Notice, ...] = (
    _n("llvm_notice", ("llvm exceptions",), r"Apache License v2\.0 with LLVM Exceptions",
       "Apache-2.0 WITH LLVM-exception"),
    _n("boost_notice", ("boost software license",), r"Boost Software License,?\s+Version 1\.0", "BSL-1.0"),
    _n("apache_notice", ("licensed under the apache license",),
       r"Licensed under the Apache License,?\s+(Version\s+)?2\.0", "Apache-2.0"),
    _n("mit_text", ("permission is hereby granted",),
       r"Permission is hereby granted,\s+free of charge,\s+to any person obtaining a copy", "MIT"),
    # "Licensed under the MIT License", "Distributed under the MIT License" (spdlog's every file), "released
    # under the terms of the MIT license", "subject to the MIT License"
    _n("mit_notice", ("the mit",),
       r"(?:(?:licensed|released|distributed|available|provided)\s+under|subject\s+to)\s+(?:the\s+terms\s+of\s+)?"
       r"the\s+MIT\s+Licen[cs]e", "MIT"),
    # "Neither the name" anywhere after the first "Redistribution ..." (the atomic group takes the first one only:
    # a search from each of many repetitions to the end of the header is quadratic)
    # The four-clause BSD adds the advertising clause, an obligation the three- and two-clause licenses do not
    # carry, and is not on the default allow-list: FreeBSD's headers (tirpc's rpcsvc/crypt.x) carry it, and must
    # not be read as BSD-3-Clause and kept
    _n("bsd4_text", _BSD, r"\A(?>.*?Redistribution and use in source and binary forms).*All advertising materials",
       "BSD-4-Clause"),
    _n("bsd3_text", _BSD, r"\A(?>.*?Redistribution and use in source and binary forms).*Neither the name",
       "BSD-3-Clause", unless=("BSD-4-Clause",)),
    _n("bsd2_text", _BSD, r"Redistribution and use in source and binary forms", "BSD-2-Clause",
       unless=("BSD-3-Clause", "BSD-4-Clause")),
    _n("isc_text", ("distribute this software for any",),
       r"Permission to use,\s+copy,\s+modify,\s+and(/or)?\s+distribute this software for any\s+purpose"
       r"\s+with or\s+without fee", "ISC"),
    _n("isc_notice", ("under the terms of the isc licen",), r"under the terms of the ISC licen[cs]e", "ISC"),
    _n("zlib_text", ("provided 'as-is',",), r"provided 'as-is',\s+without any express or implied\s+warranty", "Zlib"),
    _n("lgpl3_notice", _LGPL, r"GNU Lesser General Public License.{0,120}version 3", "LGPL-3.0-only"),
    _n("lgpl21_notice", _LGPL, r"GNU Lesser General Public License.{0,120}version 2\.1", "LGPL-2.1-only"),
    _n("lgpl2_notice", ("general public license",),
       r"GNU (Library|Lesser) General Public License.{0,120}version 2(?![.]\d)", "LGPL-2.0-only"),
    _n("gpl3_notice", _GPL, r"GNU General Public License.{0,120}version 3|\bGPL\s*v?3\b", "GPL-3.0-only"),
    _n("gpl2_notice", _GPL, r"GNU General Public License.{0,120}version 2|\bGPL\s*v?2\b", "GPL-2.0-only"),
    # AGPL has one GNU version (3); "GPL v3" above cannot match inside "AGPLv3" (no word boundary)
    _n("agpl3_notice", ("gnu affero general public license", "agpl"),
       r"GNU Affero General Public License|\bAGPL[-\s]*v?3\b", "AGPL-3.0-only"),
    # No version named: the GPL's own terms let the licensee pick any version ever published (SPDX -or-later
    # of the first one). Old headers say just "under the terms of the GNU General Public License".
    _n("gpl_any_notice", _GPL, r"GNU General Public License|\bGNU GPL\b|under (the terms of )?the GPL\b",
       "GPL-1.0-or-later", unless=("GPL-", "LGPL-", "AGPL-")),  # the LGPL and AGPL texts cite the GPL by name
    _n("lgpl_any_notice", ("general public license", "lgpl"),
       r"GNU (Library|Lesser) General Public License|\bGNU LGPL\b|under (the terms of )?the LGPL\b",
       "LGPL-2.0-or-later", unless=("LGPL-",)),
    _n("mpl2_notice", ("mozilla public license",), r"Mozilla Public License,?\s+v(ersion|\.)?\s*2\.0", "MPL-2.0"),
    _n("mpl11_notice", ("mozilla public license",), r"Mozilla Public License,?\s+v(ersion|\.)?\s*1\.1", "MPL-1.1"),
    _n("epl2_notice", ("eclipse public license", "epl"),
       r"Eclipse Public License,?\s+v(ersion|\.)?\s*2\.0|\bEPL[-\s]*v?2\.0\b", "EPL-2.0"),
    _n("epl1_notice", ("eclipse public license", "epl"),
       r"Eclipse Public License,?\s+v(ersion|\.)?\s*1\.0|\bEPL[-\s]*v?1\.0\b", "EPL-1.0"),
    _n("cddl11_notice", ("common development and distribution license",),
       r"Common Development and Distribution License.{0,40}\b1\.1\b", "CDDL-1.1"),
    _n("cddl_notice", ("common development and distribution license",),
       r"Common Development and Distribution License", "CDDL-1.0", unless=("CDDL-",)),
    _n("eupl11_notice", ("european union public licen", "eupl"),
       r"European Union Public Licen[cs]e.{0,40}\b1\.1\b|\bEUPL[-\s]*v?1\.1\b", "EUPL-1.1"),
    _n("eupl_notice", ("european union public licen", "eupl"), r"European Union Public Licen[cs]e|\bEUPL\b", "EUPL-1.2",
       unless=("EUPL-",)),
    _n("sspl_notice", ("server side public license",), r"Server Side Public License", "SSPL-1.0"),
    _n("busl_notice", ("business source license",), r"Business Source License", "BUSL-1.1"),
    _n("eula_notice", ("user licen",), r"End[- ]User Licen[cs]e Agreement", "LicenseRef-EULA"),
    # closed code that found its way into an open repository ("Unauthorized copying of this file, via any medium
    # is strictly prohibited. Proprietary and confidential."): refused as license_not_allowed
    _n("proprietary_notice", ("proprietary and confidential", "confidential and proprietary", "copying of this file"),
       r"proprietary and confidential|confidential and proprietary|unauthori[sz]ed copying of this file",
       "LicenseRef-Proprietary"),
    # "placed in the public domain", and "This file is in the public domain" (tzfile.h's, as absl ships it)
    _n("public_domain", ("the public domain",),
       r"(?:placed|released|dedicated) (?:in|into|to) the public domain|"
       r"\b(?:this|the) (?:file|code|software|source(?: code)?|header|work|library|program) (?:is|are) (?:hereby )?"
       r"(?:placed )?in the public domain", "LicenseRef-scancode-public-domain"),
)


@functools.lru_cache(maxsize=1)
def _licensing():
    return get_spdx_licensing()


_USER_DEFINED = re.compile(r"^(LicenseRef|DocumentRef)-[A-Za-z0-9.:-]+$", re.I)


def parse_spdx(expression: str) -> str | None:
    """Normalize an SPDX expression with license-expression; None when it names unknown keys. SPDX's own
    syntax for licenses off its list (`LicenseRef-Proprietary`, `MIT OR LicenseRef-Foo`) is kept as written:
    the policy then refuses such a key unless the recipe allows it by name."""
    try:
        parsed = _licensing().parse(expression, validate=True, strict=True)
    except (ExpressionError, Exception):
        try:
            loose = _licensing().parse(expression, validate=False, strict=True)
        except (ExpressionError, Exception):
            return None
        if loose is None:
            return None
        known = _licensing().known_symbols
        if all(k in known or _USER_DEFINED.match(k) for k in _licensing().license_keys(loose)):
            return loose.render()
        return None
    return parsed.render() if parsed is not None else None


def spdx_tag(text: str, max_lines: int = 200) -> str | None:
    """The raw expression of the first SPDX-License-Identifier tag in the first `max_lines` lines."""
    if "SPDX-License-Identifier:" not in text:  # the pattern is case-sensitive: a file without it has no tag
        return None
    head = "\n".join(text.split("\n", max_lines)[:max_lines])
    m = _SPDX_TAG.search(head)
    return m.group(1).strip() if m else None


def header_comments(text: str, max_lines: int = 100) -> str:
    """The comment text of the first lines of a file (where license notices live)."""
    head = "\n".join(text.split("\n", max_lines)[:max_lines])
    return "\n".join(m.group() for m in comments(head))


def plain_comment_text(block: str) -> str:
    """Comment text without line decoration (`//`, ` * `, `#`) and rule lines, whitespace collapsed."""
    return " ".join(_RULES.sub(" ", _LINE_DECORATION.sub("", block)).split())


def match_notices(block: str) -> tuple[str, str] | None:
    """(expression, rule) from the notice table. Several licenses noticed in one header all apply (AND: a file
    under MPL-2.0 with one function under BSD-3-Clause), unless the header offers the choice (OR); an EULA
    marker is OR-ed with the other notices (JUCE's "EULA or GPL" modules)."""
    block = plain_comment_text(block)
    lowered = block.lower() if block.isascii() else None
    found = [(n, m) for n in NOTICES if n.may_match(lowered) and (m := n.pattern.search(block))]
    found = [(n, m) for n, m in found
             if not (n.unless and any(h is not n and h.expression.startswith(n.unless) for h, _ in found))]
    hits = [n for n, _ in found]
    if not hits:
        return None
    if any(n.name == "eula_notice" for n in hits) and len(hits) > 1:
        others = [n.expression for n in hits if n.name != "eula_notice"]
        return " OR ".join(["LicenseRef-EULA", *dict.fromkeys(others)]), "eula_dual_notice"
    exprs, names = [], []
    for n, m in found:
        expr = n.expression
        # "... version 2 of the License, or (at your option) any later version", right after this notice
        if expr.endswith("-only") and _LATER.search(block, m.end(), m.end() + 250):
            expr, name = expr[: -len("-only")] + "-or-later", n.name + "+later"
        else:
            name = n.name
        if expr not in exprs:
            exprs.append(expr)
            names.append(name)
    for pattern, base, exception in _EXCEPTIONS:  # "X WITH E": an exception granted by the notice's words
        if pattern.search(block) and any(e.startswith(base) for e in exprs):
            exprs = [f"{e} WITH {exception}" if e.startswith(base) and " WITH " not in e else e for e in exprs]
            names = [*names[:-1], names[-1] + f"+{exception}"]
    if len(exprs) == 1:
        return exprs[0], names[0]
    op = " OR " if offers_choice(block) else " AND "
    return op.join(exprs), "+".join(names)


# Exceptions a header grants in words, to the license it names: (its words, the licenses it applies to, its
# SPDX id). libstdc++'s 760 headers grant the GCC Runtime Library Exception, recorded as plain GPL before.
_EXCEPTIONS = (
    (re.compile(r"GCC Runtime Library Exception,?\s+version\s+3\.1", re.I), "GPL-3.0", "GCC-exception-3.1"),
    (re.compile(r"\bClasspath exception\b", re.I), "GPL-2.0", "Classpath-exception-2.0"),
)


_LICENSE_WORDS = ("licen", "warrant", "permission", "redistribut", "copyright")


def _reads_like_license(block: str) -> bool:
    """Long header comments are often API docs; only those using license vocabulary go to askalono."""
    low = block.lower()
    return sum(word in low for word in _LICENSE_WORDS) >= 3


def _normalize_for_matching(block: str) -> str:
    """Text for askalono and its cache key: decoration, rule lines and copyright/author lines (which vary per
    file) gone, each line's whitespace collapsed, blank lines dropped. The line breaks stay: askalono scores a
    text joined onto one line 0.0 whatever it is (Debian's GPL-3 text: 0.998 GPL-3.0-only with its lines, 0.0
    on one line), so every license file would fall through to the notice table."""
    text = _RULES.sub(" ", _COPYRIGHT_LINE.sub("", _LINE_DECORATION.sub("", block)))
    return "\n".join(" ".join(line.split()) for line in text.splitlines() if line.strip())


@functools.lru_cache(maxsize=4096)
def _askalono(normalized: str) -> tuple[str, float] | None:
    import askalono

    result = askalono.identify(normalized)
    return (result.name, float(result.score)) if result is not None else None


def identify_text(text: str, min_score: float = 0.85) -> tuple[str, float] | None:
    """Identify a whole license text with askalono; (spdx, score) or None below `min_score`."""
    normalized = _normalize_for_matching(text)
    if len(normalized) < 200:
        return None
    hit = _askalono(normalized)
    if hit is None or hit[1] < min_score:
        return None
    spdx = parse_spdx(hit[0])
    return (spdx, hit[1]) if spdx else None


def identify_license_file(text: str) -> tuple[str, float] | None:
    """Identify a LICENSE/COPYING file: askalono on the whole text, then the notice table."""
    hit = identify_text(text, min_score=0.8)
    if hit:
        return hit
    notice = match_notices(text)
    return (notice[0], 0.75) if notice else None


def _scrubbed_quote(words: str) -> str:
    """Words of a file quoted in its license evidence, which the ledger publishes, with the scrub's placeholders
    for secrets and PII: the license stage reads a file before the filter scrubs it (docs/DESIGN.md section 2),
    and a tag such as `Proprietary, ask jane@corp.example` must not carry the address out."""
    from cpp_data.stages.lib.scrub import SECRET, scrub

    result = scrub(words)
    return SECRET if result.refused else result.text


def classify(text: str, repo_license: tuple[str, float, str] | None, declared: str | None,
             header_min_chars: int = 400) -> LicenseAnswer:
    """Run the cascade on one file. `repo_license` is (spdx, score, path of the LICENSE file) or None."""
    tag = spdx_tag(text)
    if tag:
        spdx = parse_spdx(tag)
        if spdx:
            return LicenseAnswer(spdx, "spdx_tag", 1.0, "SPDX-License-Identifier")
    block = header_comments(text)
    if block:
        notice = match_notices(block)
        if notice:
            return LicenseAnswer(notice[0], "header_notice", 0.9, notice[1])
        if len(block) >= header_min_chars and _reads_like_license(block):
            hit = identify_text(block, min_score=0.9)
            if hit:
                return LicenseAnswer(hit[0], "header_text", round(hit[1], 4), "askalono")
    if tag:
        # The file names its own license in words no SPDX list knows, and its header says nothing the notice
        # table or askalono reads: the repository's license is not assumed for it (NOASSERTION, refused).
        return LicenseAnswer("NOASSERTION", "spdx_tag", 0.0,
                             f"unrecognized SPDX-License-Identifier: {_scrubbed_quote(tag)[:100]}")
    if repo_license:
        spdx, score, path = repo_license
        return LicenseAnswer(spdx, "repo_file", round(0.9 * score, 4), path)
    if declared:
        spdx = parse_spdx(declared)
        if spdx:
            return LicenseAnswer(spdx, "declared", 0.7, "sources file")
    return LicenseAnswer("NOASSERTION", "unknown", 0.0, "")


# Keys on the SPDX list whose terms are not free to use (source-available, non-commercial): like a key off the
# list, they say nothing permissive about a file
_NOT_FREE_PREFIXES = ("SSPL-", "BUSL-", "Elastic-", "PolyForm-", "CC-BY-NC")


def family(key: str) -> str:
    """The family of one license key: copyleft and weak copyleft by prefix, an EULA proprietary, the public
    domain and every other key of the SPDX list permissive; a key off the list (LicenseRef-..., terms nobody
    here has read: a commercial license, a company's own) and a source-available one "unknown". Not permissive:
    `GPL-3.0-or-later OR LicenseRef-scancode-commercial-license` (CGAL's), kept under the copyleft opt-in,
    would then be tagged permissive, its best choice being the commercial license."""
    if key.startswith(WEAK_COPYLEFT_PREFIXES):
        return "weak_copyleft"
    if key.startswith(COPYLEFT_PREFIXES):
        return "copyleft"
    if key.startswith("LicenseRef-EULA"):
        return "proprietary"
    if key == "LicenseRef-scancode-public-domain":
        return "permissive"
    if key.startswith(("LicenseRef-", "DocumentRef-")) or key.startswith(_NOT_FREE_PREFIXES):
        return "unknown"
    return "permissive"


_FAMILY_RANK = {"permissive": 0, "weak_copyleft": 1, "copyleft": 2, "proprietary": 3, "unknown": 4}


@functools.lru_cache(maxsize=4096)  # per document, over a handful of expressions: parsing each would cost the stage
def policy(spdx: str, allow: frozenset[str], allow_copyleft: bool) -> tuple[bool, str, str]:
    """Decide an expression against the allow-list: (allowed, family, refusal rule or "").

    Copyleft is decided on every term first: any copyleft key anywhere in the expression (even as one side
    of an OR) refuses it unless the recipe opts in. Otherwise OR needs one allowed branch, AND needs all, and
    `X WITH E` is allowed when listed as such or when X is allowed (exceptions only add permissions). The family
    is the expression's: an OR's most permissive branch, an AND's strictest term (so `MIT OR GPL-2.0-only`,
    refused by default, is a permissive-family file; kept under an opt-in, it is tagged permissive).
    """
    if spdx in ("NOASSERTION", ""):
        return False, "unknown", "no_license"
    try:
        node = _licensing().parse(spdx)
    except Exception:
        return False, "unknown", "unparseable_license"
    fam_of_expression = _expression_family(node)
    if not allow_copyleft and any(family(k) in ("copyleft", "weak_copyleft")
                                  for k in _licensing().license_keys(node)):
        return False, fam_of_expression, "copyleft_not_opted_in"  # whatever else it holds: an EULA, a choice
    allowed, fam, rule = _decide(node, allow, allow_copyleft)
    return allowed, (fam_of_expression if allowed else fam), rule


def expression_family(spdx: str) -> str:
    """The family of an SPDX expression (its best choice for OR, its strictest term for AND); "unknown" for
    NOASSERTION or an expression that does not parse."""
    try:
        return _expression_family(_licensing().parse(spdx)) if spdx not in ("NOASSERTION", "") else "unknown"
    except Exception:
        return "unknown"


def _expression_family(n) -> str:
    """OR: the licensee's best choice (most permissive); AND: the strictest term; WITH: its license."""
    if isinstance(n, LicenseWithExceptionSymbol):
        return family(n.license_symbol.key)
    if isinstance(n, LicenseSymbol):
        return family(n.key)
    fams = [_expression_family(a) for a in n.args]
    pick = min if n.operator.strip().upper() == "OR" else max
    return pick(fams, key=lambda f: _FAMILY_RANK[f])


def _decide_symbol(key: str, allow: frozenset[str], allow_copyleft: bool) -> tuple[bool, str, str]:
    fam = family(key)
    if key in allow:
        return True, fam, ""
    if fam in ("copyleft", "weak_copyleft"):
        return (True, fam, "") if allow_copyleft else (False, fam, "copyleft_not_opted_in")
    if fam == "proprietary":
        return False, fam, "eula_source_available"
    return False, "unknown", "license_not_allowed"


def _decide(n, allow: frozenset[str], allow_copyleft: bool) -> tuple[bool, str, str]:
    """(allowed, family, rule) of an expression node: OR needs one allowed branch (the most permissive one
    answers), AND needs all (the first refused one answers), `X WITH E` is allowed as listed or by X."""
    if isinstance(n, LicenseWithExceptionSymbol):
        if f"{n.license_symbol.key} WITH {n.exception_symbol.key}" in allow:
            return True, "permissive", ""
        return _decide(n.license_symbol, allow, allow_copyleft)
    if isinstance(n, LicenseSymbol):
        return _decide_symbol(n.key, allow, allow_copyleft)
    results = [_decide(a, allow, allow_copyleft) for a in n.args]
    if n.operator.strip().upper() == "OR":
        ok = [r for r in results if r[0]]
        if ok:
            return min(ok, key=lambda r: _FAMILY_RANK[r[1]])
        return max(results, key=lambda r: _FAMILY_RANK[r[1]])
    bad = [r for r in results if not r[0]]
    if bad:
        return bad[0]
    return True, max((r[1] for r in results), key=lambda f: _FAMILY_RANK[f]), ""
