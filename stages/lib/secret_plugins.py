"""Credential formats detect-secrets 1.5 has no plugin for, written as detect-secrets plugins.

detect-secrets loads plugins from a file named in its settings (`plugins_used` entries with a `path`), so these
run inside its scanner with its filters, and scrub's prefilter marks their lines with their own patterns, like
any plugin it has no hand-made prefilter for. Each format has a fixed prefix and a fixed length, so a match in
C++ is a credential, not code:
- GitHub fine-grained personal access tokens: `github_pat_` and 82 word characters (22, an underscore, 59);
  detect-secrets' GitHub plugin knows only the classic `ghp_`/`gho_`/`ghu_`/`ghs_`/`ghr_` tokens.
- Google API keys: `AIza` and 35 characters of `[0-9A-Za-z_-]`.
- Anthropic API keys: `sk-ant-api03-` or `sk-ant-admin01-`, 93 characters of `[A-Za-z0-9_-]`, then `AA`.
- AWS secret access keys written unquoted after their name, as in `~/.aws/credentials` (`aws_secret_access_key =
  ...`) or a shell export (`AWS_SECRET_ACCESS_KEY=...`), pasted into a comment or a raw string: 40 characters
  of `[A-Za-z0-9/+]`. detect-secrets' AWS plugin wants the value quoted, so it would redact the key id on the
  line above and publish the secret beside it. The name is the prefix here, not the value.
- Passwords in two places detect-secrets' KeywordDetector (on, for `password = "..."`, `secret("...")`) does
  not look: a `#define` whose name holds a credential word (`#define SMTP_PASSWORD "..."`: no `=` sign), and
  the `Password=` or `Pwd=` pair of an ODBC/ADO.NET connection string (`"Server=db;Uid=sa;Pwd=...;"`), taken
  only beside another of that string's usual keys, so C++'s own `pwd=buf;` is left alone.
Written by hand because no kept library has them; the formats are the providers' published ones (for the two
password forms, the C preprocessor's and the connection strings' syntax).
"""

from __future__ import annotations

import re

from detect_secrets.plugins.base import RegexBasedDetector


class GitHubFineGrainedTokenDetector(RegexBasedDetector):
    """GitHub fine-grained personal access tokens."""

    secret_type = "GitHub Fine-Grained Token"
    denylist = [re.compile(r"github_pat_[A-Za-z0-9_]{82}")]


class GoogleApiKeyDetector(RegexBasedDetector):
    """Google Cloud / Firebase / Maps API keys."""

    secret_type = "Google API Key"
    denylist = [re.compile(r"AIza[0-9A-Za-z_\-]{35}")]


class AnthropicKeyDetector(RegexBasedDetector):
    """Anthropic API and admin keys."""

    secret_type = "Anthropic API Key"
    denylist = [re.compile(r"sk-ant-(?:api03|admin01)-[A-Za-z0-9_\-]{93}AA")]


class AwsSecretKeyByNameDetector(RegexBasedDetector):
    """AWS secret access keys after their own name, quoted or not (the credentials-file and shell forms)."""

    secret_type = "AWS Secret Access Key By Name"
    denylist = [re.compile(r"(?i)\baws_?secret_?access_?key\b[\"']?\s*[:=]\s*[\"']?"
                           r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])")]


# A name that holds a credential, as detect-secrets' KeywordDetector spells them (entries of its DENYLIST, which
# scrub's prefilter looks for on a line before this plugin sees it).
_CREDENTIAL_WORD = r"(?:api_?key|auth_?key|priv(?:ate)?_?key|client_?key|passw(?:or)?d|pwd|secret)"


class DefinedPasswordDetector(RegexBasedDetector):
    """A string macro named for a credential: `#define DB_PASSWORD "..."`, `#define API_SECRET "..."`.
    KeywordDetector's C++ patterns want an `=` or a call, which a #define has neither of. Over /usr/include,
    such macros are mostly protocol names (OpenSSL's `OSSL_KDF_PARAM_PASSWORD "pass"`, `TLS_MD_MASTER_SECRET_CONST
    "\\x6d..."`, tweetnacl's `crypto_secretbox_PRIMITIVE`), so the word must be a whole part of the name (between
    underscores or at an end) and the value a password's shape: 6 or more characters with no space or escape,
    letters and something else."""

    secret_type = "Defined Password"
    denylist = [re.compile(r"(?i)^\s*#\s*define\s+(?:\w*_)?" + _CREDENTIAL_WORD + r"(?:_\w*)?\s+(?:[LuU]8?)?"
                           r"\"((?=[^\"\s\\]*[A-Za-z])(?=[^\"\s\\]*[^A-Za-z\"\s\\])[^\"\s\\]{6,})\"")]


# The keys a connection string's password sits among (ODBC, ADO.NET, OLE DB, JDBC-style pairs)
_CONNECTION_KEY = (r"(?:server|data\s?source|host|address|uid|user\s?id|user(?:name)?|database|initial\s?catalog|driver"
                   r"|dsn|provider|port)")


class ConnectionStringPasswordDetector(RegexBasedDetector):
    """The password of a `key=value;` connection string (`Server=db;Uid=sa;Pwd=...;`), after or before
    another of its keys."""

    secret_type = "Connection String Password"
    denylist = [re.compile(r"(?i)\b" + _CONNECTION_KEY + r"\s*=[^;\"'\n]*;\s*(?:password|pwd)\s*=\s*([^;\"'\s]+)"),
                re.compile(r"(?i)\b(?:password|pwd)\s*=\s*([^;\"'\s]+)\s*;\s*" + _CONNECTION_KEY + r"\s*=")]


PLUGINS = (GitHubFineGrainedTokenDetector, GoogleApiKeyDetector, AnthropicKeyDetector, AwsSecretKeyByNameDetector,
           DefinedPasswordDetector, ConnectionStringPasswordDetector)
