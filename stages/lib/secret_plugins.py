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
  of `[A-Za-z0-9/+]`. detect-secrets' AWS plugin wants the value quoted, so the key id on the line above was
  redacted and the secret beside it published. The name is the prefix here, not the value.
Written by hand because no kept library has them; the formats are the providers' published ones.
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


PLUGINS = (GitHubFineGrainedTokenDetector, GoogleApiKeyDetector, AnthropicKeyDetector, AwsSecretKeyByNameDetector)
