"""Secret and PII scrubbing with stable placeholders (docs/DESIGN.md section 3).

Secrets are found by detect-secrets' own scanner: its plugins run line by line with its false-positive filters,
through the same steps as its `scan_file` (line filters, each plugin's `analyze_line`, secret filters, context
filters), on the lines of a document. Two choices, both judged on the labelled set in tests/fixtures/secrets:
- Three formats detect-secrets has no plugin for (GitHub fine-grained tokens, Google API keys, Anthropic keys)
  are added as detect-secrets plugins (secret_plugins.py), loaded through its custom-plugin setting.
- KeywordDetector is on, in its C++ mode (a quoted value assigned to, compared with or passed to a name from
  its denylist: `db_password = "..."`, `std::string secret("...")`), for hardcoded passwords, which no
  format and no entropy limit catches. One filter of ours (`keyword_value_is_a_label`) drops its findings
  whose value is a message (`kPasswordPrompt = "Enter password: "`) or a name holding a credential word
  (`kPasswordField = "password"`, POCO's documented `password = "secret"`): labels, not credentials. Over
  the 31,210 C/C++ files under this machine's /usr/include and /usr/src, KeywordDetector and the two plugins
  of ours report nothing (`bench/secrets_scan.py /usr/include /usr/src`, findings by type). Passwords in URLs are
  BasicAuthDetector's, in `#define`s and ODBC-style connection strings two plugins of ours (secret_plugins).
- The entropy plugins (Base64, Hex) count only on lines that name a key, token, secret, password or
  credential (filter `entropy_without_secret_name`): hash test vectors, base64 test data and colour tables are
  high-entropy strings too, and they are not secrets. detect-secrets' `is_indirect_reference` filter is off: it
  drops any line shaped `x = f(...)`, which in C++ is `auto s = std::string("ghp_...")`.

What is written by hand, and why: detect-secrets reports a secret's value, sometimes only part of it (the
GitHub plugin reports `ghp`, the JWT plugin the token without its signature), and it never edits text. We
replace every occurrence of the value, widened to the whole token it sits in (letters, digits and
`+/=_.~-`), by a placeholder, then scan the changed lines again until nothing is found (a file still holding
a finding after three rounds is refused, `secret_unredactable`). A private key block refuses the whole file
(`secret_private_key`).

Speed: the scanner's cost is almost all per-line overhead, which makes it one of the slowest steps per byte. A
prefilter sends it only the lines that can hold a finding: lines matched by any enabled plugin's own patterns
(run over the whole text, multi-line) or naming a secret (the only lines where the entropy plugins count), and
runs on each line only the plugins whose own patterns marked it. Every finding of a plugin alone lies on a line
its patterns mark, so the prefiltered scan finds exactly the same (tested); bench/secrets_scan.py measures both
(bench/results/secrets-debian.json).

PII that detect-secrets does not cover (e-mail addresses, user home paths) uses two small regexes; public IPv4
addresses use the pattern of detect-secrets' IPPublicDetector. Placeholders are stable strings, so scrubbed text stays
deterministic and dedup still matches copies that differ only in a scrubbed value: <redacted-secret>,
<redacted-email>, <redacted-ip>, <redacted-user>.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

SECRET = "<redacted-secret>"
EMAIL = "<redacted-email>"
IP = "<redacted-ip>"
USER = "<redacted-user>"

_EMAIL = re.compile(r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![\w-])")
_HOME = re.compile(r"(/home/|/Users/|[A-Za-z]:\\\\?Users\\\\?)([A-Za-z0-9._-]+)")
# Names under which a high-entropy value is a credential: api_key, kToken, client_secret, password, auth...
_NAMES = ("key", "token", "secret", "pass", "pw", "credential", "auth", "bearer")
SECRET_NAME = re.compile("|".join(_NAMES), re.I)
_TOKEN_CHARS = re.compile(r"[A-Za-z0-9+/=_.~\-]")
# On a line naming a secret, a value some plugin could report: a quoted run of the entropy plugins' charsets
# (passing the hex limit, 3.0, takes at least 9 distinct characters) or a long unquoted run (the keyword-led
# patterns of the AWS, Cloudant, IBM and SoftLayer plugins want 24 to 64 characters).
_LONG_RUN = re.compile(r"(['\"])[A-Za-z0-9+/=_\\-]{9,}\1|[A-Za-z0-9+/=_\-]{20,}")
# Per plugin, patterns that match wherever its own patterns match (supersets led by a literal, so `re` scans
# at memchr speed); "name": every pattern of the plugin needs a secret name on the line and a long run (above).
# A plugin missing here is prefiltered with its own patterns: correct, only slower, unless they are literal-led
# already (Twilio's `AC[a-z0-9]{32}` and `SK[a-z0-9]{32}`: joined as `(?:AC|SK)...` they lose the literal
# prefix, and that one pattern took a third of the prefilter's time).
_PREFILTER = {
    "ArtifactoryDetector": [r"AKC[a-zA-Z0-9]{10}", r"AP[\dABCDEF][a-zA-Z0-9]{8}"],
    "AWSKeyDetector": [r"(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}", "name"],
    "AzureStorageKeyDetector": [r"AccountKey="],
    "BasicAuthDetector": [r"://"],
    "CloudantDetector": ["name", r"\.cloudant\.com"],
    "DiscordBotTokenDetector": [r"\.[a-zA-Z\d_-]{6}\.[a-zA-Z\d_-]{27}"],
    "GitHubTokenDetector": [r"gh[pousr]_"],
    "GitLabTokenDetector": [r"gl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-", r"GR1348941"],
    "IbmCloudIamDetector": ["name"],
    "IbmCosHmacDetector": ["name"],
    "JwtTokenDetector": [r"eyJ"],
    "MailchimpDetector": [r"-us[0-9]"],
    "NpmDetector": [r":_authToken="],
    "OpenAIDetector": [r"T3BlbkFJ"],
    "PrivateKeyDetector": [r"PRIVATE KEY", r"PuTTY-User-Key-File"],
    "PypiTokenDetector": [r"pypi-"],
    "SendGridDetector": [r"SG\."],
    "SlackDetector": [r"xox[abposr]-", r"hooks\.slack\.com"],
    "SoftlayerDetector": ["name", r"api\.softlayer\.com"],
    "SquareOAuthDetector": [r"sq0csp-"],
    "StripeDetector": [r"k_live_"],
    "TelegramBotTokenDetector": [r":[0-9A-Za-z_-]{35}"],
    "Base64HighEntropyString": ["name"],
    "HexHighEntropyString": ["name"],
    # "keyword": every pattern of the plugin needs a word of KeywordDetector's denylist on the line
    "KeywordDetector": ["keyword"],
    "DefinedPasswordDetector": ["keyword"],
    "ConnectionStringPasswordDetector": ["keyword"],
}
# IPPublicDetector: addresses are PII, replaced below with its pattern (inside the scanner its findings never
# survive detect-secrets' is_not_alphanumeric_string filter: they hold no letter).
_EXCLUDED_PLUGINS = frozenset({"IPPublicDetector"})
# The "keyword" plugins' lines: those holding a secret name (_NAMES) or this word, ASCII-lowercase (each of
# KeywordDetector's denylist entries holds one of them), then the denylist itself found on the line.
_KEYWORD_ONLY = ("contrase",)
_ENTROPY_TYPES = frozenset({"Base64 High Entropy String", "Hex High Entropy String"})
_KEYWORD_TYPES = frozenset({"Secret Keyword", "Defined Password", "Connection String Password"})
_FILENAME = "document.cpp"  # what the plugins and filename filters see: C++ source
_ROUNDS = 3
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


@dataclass(frozen=True)
class ScrubResult:
    text: str
    redactions: int
    refused: str | None  # rule name when the whole file must be refused


@dataclass(frozen=True)
class Finding:
    line: int  # 1-based
    type: str
    value: str


@functools.lru_cache(maxsize=1)
def _ip_patterns() -> tuple:
    from detect_secrets.plugins.ip_public import IPPublicDetector

    return tuple(IPPublicDetector().denylist)


def keyword_value_is_a_label(secret: str, plugin) -> bool:
    """A detect-secrets filter (True: drop the finding): a password-by-name finding whose value is a label, not
    a credential: a message (a space in it, or a colon at its end: `kPasswordPrompt = "Enter password: "`), or
    a name that holds a credential word itself (a config field, a header: `kPasswordField = "password"`,
    `kApiKeyHeader = "X-Api-Key"`)."""
    if plugin.secret_type not in _KEYWORD_TYPES:
        return False
    if any(c.isspace() for c in secret) or secret.endswith(":"):
        return True
    label = secret.translate(_ASCII_LOWER).replace("-", "_")  # X-Api-Key spells api_key with a dash
    return bool(_keyword_denylist().search(label))


def entropy_without_secret_name(secret: str, plugin, line: str) -> bool:
    """A detect-secrets filter (True: drop the finding): an entropy plugin's finding on a line that names no
    key, token, secret, password or credential outside the value itself. (detect-secrets injects arguments by
    parameter name and runs a filter at the first scan step that has all of them: `secret` puts this one with
    the per-finding filters.) The value is taken out first: base64 holds such names by chance (an ed25519
    public key holding `pW`, a SHA-256 fingerprint holding `kEY`, both in libssh's tests)."""
    outside = line.replace(secret, " ") if secret else line
    return plugin.secret_type in _ENTROPY_TYPES and not SECRET_NAME.search(outside)


def aws_key_inside_a_longer_run(secret: str, plugin, line: str) -> bool:
    """A detect-secrets filter (True: drop the finding): an AWS access key id that is part of a longer run of
    capitals and digits wherever it occurs on the line. An id is 20 characters standing alone, and the plugin's
    pattern has no word boundaries: DNA in rapidfuzz's tests (`...CCACCATGGTTTTCTAAGGGGA...`) would be redacted
    as `ACCATGGTTTTCTAAGGGGA`."""
    if plugin.secret_type != "AWS Access Key" or not secret:
        return False
    end = len(secret)
    return all(_ID_CHAR.fullmatch(line[max(at - 1, 0):at]) or _ID_CHAR.fullmatch(line[at + end:at + end + 1])
               for at in _finds(line, secret))  # False once an occurrence stands alone: a key


_ID_CHAR = re.compile(r"[0-9A-Z]")


_applied: list[float] = []  # the entropy limit detect-secrets' settings were last set for, in this process


def configure(entropy_limit: float = 4.5) -> None:
    """detect-secrets' settings for `entropy_limit` (set again whenever the limit changes: they are global)."""
    if _applied != [entropy_limit]:
        _settings(entropy_limit)
        _applied[:] = [entropy_limit]


def _settings(entropy_limit: float) -> None:
    """Set detect-secrets' process-wide settings: its plugins minus the excluded, its default filters plus
    ours."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.settings import configure_settings_from_baseline, get_filters, get_plugins, get_settings

    from cpp_data.stages.lib import secret_plugins

    ours = {cls.__name__ for cls in secret_plugins.PLUGINS}
    plugins = []
    classes: list[Any] = list(get_mapping_from_secret_type_to_class().values())
    for cls in classes:
        if cls.__name__ in _EXCLUDED_PLUGINS or cls.__name__ in ours:
            continue
        plugins.append({"name": cls.__name__, **({"limit": entropy_limit}
                                                if cls.__name__ == "Base64HighEntropyString" else {})})
    # formats detect-secrets has no plugin for, loaded through its own custom-plugin setting (secret_plugins)
    plugins += [{"name": name, "path": f"file://{secret_plugins.__file__}"} for name in sorted(ours)]
    settings = get_settings()
    settings.clear()
    configure_settings_from_baseline({"plugins_used": plugins})
    get_mapping_from_secret_type_to_class.cache_clear()  # so that it reads the custom plugins' file
    settings.disable_filters("detect_secrets.filters.heuristic.is_indirect_reference")
    settings.filters[f"{__name__}.entropy_without_secret_name"] = {}
    settings.filters[f"{__name__}.keyword_value_is_a_label"] = {}
    settings.filters[f"{__name__}.aws_key_inside_a_longer_run"] = {}
    get_plugins.cache_clear()  # not detect-secrets' cache_bust: that also drops the settings just made
    get_filters.cache_clear()


@functools.lru_cache(maxsize=1)
def _prefilter_patterns() -> tuple[tuple[tuple[re.Pattern, frozenset[str]], ...], frozenset[str], frozenset[str]]:
    """The prefilter's patterns for the enabled plugins (the same plugins whatever the limit), each with the
    plugins it stands for, the plugins prefiltered by a secret name ("name") and those by a word of
    KeywordDetector's denylist ("keyword")."""
    from detect_secrets.settings import get_plugins

    owners: dict[str, set[str]] = {}
    named: set[str] = set()
    keyword: set[str] = set()
    for plugin in get_plugins():
        name = type(plugin).__name__
        for p in _PREFILTER.get(name) or [x.pattern for x in getattr(plugin, "denylist", ())]:
            if p == "name":
                named.add(name)
            elif p == "keyword":
                keyword.add(name)
            else:
                owners.setdefault(p, set()).add(name)
    patterns = tuple((re.compile(p, re.MULTILINE), frozenset(o)) for p, o in owners.items())
    return patterns, frozenset(named), frozenset(keyword)


@functools.lru_cache(maxsize=1)
def _keyword_denylist() -> re.Pattern:
    """KeywordDetector's denylist (detect-secrets' own list) as one pattern for ASCII-lowercased text, each
    entry cut at its first non-ASCII letter (`contraseña`: an ASCII lowering leaves `Ñ` as it is)."""
    from detect_secrets.plugins.keyword import DENYLIST

    return re.compile("|".join(re.sub(r"[^\x00-\x7f].*", "", entry, flags=re.S) for entry in DENYLIST))


def _lines_holding(lower: str, starts: list[int], words: tuple[str, ...]) -> set[int]:
    """The lines (1-based) of `lower` (ASCII-lowercased text) holding any of `words` (str.find runs at memchr
    speed; a regex alternation of the words does not)."""
    import bisect

    lines: set[int] = set()
    for word in words:
        i = lower.find(word)
        while i >= 0:
            n = bisect.bisect_right(starts, i)
            lines.add(n)
            i = lower.find(word, starts[n] if n < len(starts) else len(lower))
    return lines


def candidate_plugins(text: str, entropy_limit: float = 4.5) -> dict[int, frozenset[str]]:
    """The lines the scanner must see (1-based, in order) and, for each, the plugins that must scan it: those
    whose prefilter pattern matches there (a match spanning lines marks each), and on lines naming a secret
    that hold a long run (`_LONG_RUN`), the plugins prefiltered by a name, and on lines holding a word of
    KeywordDetector's denylist, the plugins prefiltered by one. A plugin can only report on a line its own
    prefilter marks, so the others are not run there: the scanner's per-line, per-plugin calls would otherwise
    be most of the scrub's time."""
    import bisect

    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    configure(entropy_limit)
    patterns, by_name, by_keyword = _prefilter_patterns()
    found: dict[int, set[str]] = {}
    for pattern, owners in patterns:
        for m in pattern.finditer(text):
            first = bisect.bisect_right(starts, m.start())
            for n in range(first, bisect.bisect_right(starts, max(m.start(), m.end() - 1)) + 1):
                found.setdefault(n, set()).update(owners)
    lower = text.translate(_ASCII_LOWER)  # ASCII only: str.lower() can change lengths (İ)

    def line(n: int) -> tuple[int, int]:
        return starts[n - 1], starts[n] - 1 if n < len(starts) else len(text)

    named = _lines_holding(lower, starts, _NAMES)
    if by_name:
        for n in named:
            if _LONG_RUN.search(text, *line(n)):
                found.setdefault(n, set()).update(by_name)
    if by_keyword:  # every denylist word but the Spanish one holds a name ("key", "pass", "pw", "secret")
        denylist = _keyword_denylist()
        for n in named | _lines_holding(lower, starts, _KEYWORD_ONLY):
            if denylist.search(lower, *line(n)):
                found.setdefault(n, set()).update(by_keyword)
    return {n: frozenset(found[n]) for n in sorted(found)}


def scan_lines(lines: list[str], numbers: list[int] | None = None,
               plugins: dict[int, frozenset[str]] | None = None) -> Iterator[Finding]:
    """detect-secrets' line scan (the steps of its `_process_line_based_plugins`) over `numbers` (1-based;
    None: every line), with the full file as each line's context; with `plugins`, a line is scanned only by
    the plugins named for it (in the scanner's order), else by all."""
    from detect_secrets.core.scan import _is_filtered_out, _scan_line
    from detect_secrets.settings import get_plugins
    from detect_secrets.util.code_snippet import get_code_snippet

    for n in numbers if numbers is not None else range(1, len(lines) + 1):
        line = lines[n - 1].rstrip()
        context = get_code_snippet(lines=lines, line_number=n)
        if _is_filtered_out(required_filter_parameters=["line"], filename=_FILENAME, line=line, context=context):
            continue
        names = plugins[n] if plugins is not None else None
        for plugin in get_plugins():
            if names is not None and type(plugin).__name__ not in names:
                continue
            for secret in _scan_line(plugin=plugin, filename=_FILENAME, line=line, line_number=n, context=context):
                if not _is_filtered_out(required_filter_parameters=["context"], filename=secret.filename,
                                        secret=secret.secret_value, plugin=plugin, line=line, context=context):
                    yield Finding(n, secret.type, secret.secret_value or "")


def find_secrets(text: str, entropy_limit: float = 4.5, prefilter: bool = True) -> list[Finding]:
    """Every finding of the scanner in `text` (prefiltered, or over every line)."""
    configure(entropy_limit)
    lines = text.split("\n")
    if not prefilter:
        return list(scan_lines(lines))
    candidates = candidate_plugins(text, entropy_limit)
    return list(scan_lines(lines, list(candidates), candidates))


def _gated_lines(text: str, gate: str | re.Pattern) -> Iterator[tuple[int, int]]:
    """(start, end) of each line holding `gate` (a literal, found with str.find, or a pattern)."""
    last = -1
    hits = (m.start() for m in gate.finditer(text)) if isinstance(gate, re.Pattern) else _finds(text, gate)
    for i in hits:
        a = text.rfind("\n", 0, i) + 1
        if a <= last:
            continue
        b = text.find("\n", i)
        last = b = len(text) if b < 0 else b
        yield a, b


def _finds(text: str, literal: str) -> Iterator[int]:
    i = text.find(literal)
    while i >= 0:
        yield i
        i = text.find(literal, i + 1)


# a line can hold an address only if it holds this (without the address's first digit: a pattern starting with
# `\d` is tried at every digit of the text, one starting with `\.` is searched for as a literal, an order of
# magnitude faster)
_IP_GATE = re.compile(r"\.\d{1,3}\.\d{1,3}\.\d")
# A dotted quad after these words (within 32 characters on its line) or an opening bracket numbers a section or
# a version, not a host: "C++11 standard [17.6.3.5]", "Section: 20.15.4.3", "Intel Compiler 2019 (19.0.0.117)"
# in abseil and CGAL, which detect-secrets' pattern alone takes for public IPs.
_NUMBERED_SECTION = re.compile(r"(?:\b(?:section|sect|clause|paragraph|standard|version|ver|release|rev|"
                               r"revision|build|compiler)\b|§)[^\n]*$|\[[ \t]*$", re.I)


def _is_public(address: str) -> bool:
    """Whether an address detect-secrets' pattern found (an IPv4 address, perhaps with a port) is one a host on
    the internet has, as Python's ipaddress judges it: not unspecified (0.0.0.0), broadcast, link-local,
    reserved for documentation, multicast or otherwise special. Those are constants of networking code
    (`GetAddress("0.0.0.0", port)` in LightGBM, 46 in libssh's address-parsing tests), not anyone's address."""
    import ipaddress

    try:
        ip = ipaddress.IPv4Address(address.split(":", 1)[0])
    except ValueError:
        return True  # the pattern's own judgement stands
    return ip.is_global and not ip.is_multicast


def _pii_spans(text: str) -> list[tuple[int, int, str]]:
    """E-mail addresses, public IPv4 addresses and user names in home paths, each pattern run only on the lines
    holding what it cannot match without (an @, a dotted quad, a home directory): the patterns cost more than
    the rest of the scrub over whole files."""
    spans = []
    for a, b in _gated_lines(text, "@"):
        spans += [(m.start(), m.end(), EMAIL) for m in _EMAIL.finditer(text, a, b)]
    for a, b in _gated_lines(text, _IP_GATE):
        for pattern in _ip_patterns():
            g = 1 if pattern.groups else 0
            spans += [(m.start(g), m.end(g), IP) for m in pattern.finditer(text, a, b)
                      if _is_public(m.group(g))
                      and not _NUMBERED_SECTION.search(text, max(a, m.start(g) - 32), m.start(g))]
    for gate in ("/home/", "Users"):
        for a, b in _gated_lines(text, gate):
            spans += [(m.start(2), m.end(2), USER) for m in _HOME.finditer(text, a, b)]
    return sorted(set(spans))


def _redact_line(line: str, value: str, placeholder: str) -> str | None:
    """The line with every occurrence of `value`, widened to its whole token, replaced; None if absent."""
    if not value or value not in line:
        return None
    out, pos = [], 0
    while (i := line.find(value, pos)) >= 0:
        a, b = i, i + len(value)
        while a > pos and _TOKEN_CHARS.match(line[a - 1]):
            a -= 1
        while b < len(line) and _TOKEN_CHARS.match(line[b]):
            b += 1
        out += [line[pos:a], placeholder]
        pos = b
    out.append(line[pos:])
    return "".join(out)


# Key material: a run of base64 as a key's body lines hold (64 or 70 characters each; 40 leaves room for one cut
# by an escaped line break inside a string literal)
_KEY_BODY = re.compile(r"[A-Za-z0-9+/]{40,}")
_KEY_MARKER = re.compile("|".join(_PREFILTER["PrivateKeyDetector"]))  # what marks the plugin's lines
_KEY_BODY_LINES = 12  # the marker's line and the lines after it where the body must start (PuTTY's or an
# encrypted PEM's headers come first)


def _key_material_follows(lines: list[str], number: int) -> bool:
    """Whether base64 key material follows the private key marker on line `number` (1-based) within
    _KEY_BODY_LINES lines. detect-secrets' PrivateKeyDetector reports the marker alone, and libssh's
    `#define RSA_HEADER_BEGIN "-----BEGIN RSA PRIVATE KEY-----"` refused two files of code that read keys."""
    line = lines[number - 1]
    marker = _KEY_MARKER.search(line)
    after = "\n".join([line[marker.end() if marker else 0:], *lines[number:number - 1 + _KEY_BODY_LINES]])
    return bool(_KEY_BODY.search(after))


def scrub(text: str, entropy_limit: float = 4.5) -> ScrubResult:
    """Replace secrets and PII in `text` by placeholders; refuse files that carry a private key or a secret
    that would not go away."""
    configure(entropy_limit)
    lines = text.split("\n")
    # the first round's plugins; changed lines are rescanned by all
    plugins: dict[int, frozenset[str]] | None = candidate_plugins(text, entropy_limit)
    numbers = list(plugins or ())
    redactions = 0
    for _ in range(_ROUNDS):
        findings = list(scan_lines(lines, numbers, plugins))
        plugins = None
        if not findings:
            break
        changed = set()
        for f in findings:
            if f.type == "Private Key":
                if _key_material_follows(lines, f.line):
                    return ScrubResult(text, 0, "secret_private_key")
                continue  # the marker alone, as code that parses or writes keys spells it
            new = _redact_line(lines[f.line - 1], f.value, SECRET)
            if new is None:
                if f.value not in "\n".join(lines):
                    continue  # an earlier finding's widened token already took it
                return ScrubResult(text, 0, "secret_unredactable")
            lines[f.line - 1] = new
            changed.add(f.line)
            redactions += 1
        numbers = sorted(changed)
    else:
        if list(scan_lines(lines, numbers)):
            return ScrubResult(text, 0, "secret_unredactable")
    out = "\n".join(lines)
    spans = _pii_spans(out)
    if spans:
        parts, pos = [], 0
        for start, end, placeholder in sorted(spans):
            if start < pos:
                continue
            parts += [out[pos:start], placeholder]
            pos = end
            redactions += 1
        parts.append(out[pos:])
        out = "".join(parts)
    return ScrubResult(out, redactions, None)


def _names_a_secret(name: str, entropy_limit: float) -> bool:
    """Whether a path or one of its segments holds a secret the scanner finds, or an e-mail address."""
    return bool(_EMAIL.search(name)) or any(f.type != "Private Key" for f in find_secrets(name, entropy_limit))


def scrub_path(path: str, entropy_limit: float = 4.5) -> str:
    """`path` with every segment that holds a secret or an e-mail address replaced by the placeholder, the
    file name's extension kept (stages tell C from C++ by it). A whole segment goes, not just the value, since a
    name has no token boundaries the scanner's widening could keep to. Addresses and home directories are not
    read in paths: a directory named `home` or a version such as `v1.2.3.4` is no one's. The whole path is
    scanned first, so a path with nothing to scrub costs one scan."""
    if not _names_a_secret(path, entropy_limit):
        return path
    segments = path.split("/")
    for k, segment in enumerate(segments):
        if _names_a_secret(segment, entropy_limit):
            dot = segment.rfind(".")
            last = k == len(segments) - 1
            segments[k] = SECRET + (segment[dot:] if last and dot > 0 and len(segment) - dot <= 5 else "")
    return "/".join(segments)
