"""Values for clusterctl variables, read the way clusterctl reads them.

clusterctl reads variables through viper (cmd/clusterctl/client/config/reader_viper.go)
with ``AutomaticEnv``: an environment variable named like the variable, upper-cased,
takes precedence over the clusterctl config file ("In case the same variable is defined
both within the environment variables and clusterctl configuration file, the
environment variables value takes precedence", variables_client.go); an empty
environment variable counts as set (``AllowEmptyEnv``); config keys are
case-insensitive. The operator builds each provider's variables the same way from its
config Secret, which is what airgap fills.

The values are secrets (credentials, tokens): they go into the Secret files (mode 0600)
and nowhere else. No message, log line or ``repr`` here ever shows one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from airgap.core.errors import InputError
from airgap.core.inputfile import read_small
from airgap.core.limits import MAX_VARIABLES_BYTES

if TYPE_CHECKING:
    import yaml

_BOOLEANS = {"true", "True", "TRUE", "false", "False", "FALSE"}  # YAML 1.2, as viper reads
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_NULL_TAG = "tag:yaml.org,2002:null"
_BOOL_TAG = "tag:yaml.org,2002:bool"


@dataclass(frozen=True, repr=False)
class VariableValues:
    """Where a variable's value comes from: the environment, then the ``--variables``
    file, then ``fallback`` (the import's registry credentials for OCI_USERNAME/...)."""

    file: Mapping[str, str] = field(default_factory=dict)  # keys lower-cased
    environ: Mapping[str, str] = field(default_factory=dict)
    fallback: Callable[[str], str | None] | None = None

    @classmethod
    def from_sources(
        cls, file_values: Mapping[str, str], environ: Mapping[str, str]
    ) -> VariableValues:
        return cls({key.lower(): value for key, value in file_values.items()}, dict(environ))

    def get(self, name: str) -> str | None:
        """The value of variable ``name``, or None when nobody gave one."""
        value = self.environ.get(name.upper())
        if value is None:
            value = self.file.get(name.lower())
        if value is None and self.fallback is not None:
            value = self.fallback(name)
        return value

    def with_fallback(self, fallback: Callable[[str], str | None]) -> VariableValues:
        return replace(self, fallback=fallback)

    def __repr__(self) -> str:  # never a value in a log or a traceback
        return f"VariableValues(<{len(self.file)} from a file, the environment>)"


def _clean(problem: str | None) -> str:
    """A YAML error's problem without the quoted text it may carry (a value's piece)."""
    return _QUOTED.sub("…", problem or "invalid YAML")


def _where(path: Path, node: yaml.Node | yaml.MarkedYAMLError) -> str:
    import yaml  # loaded by parse_variables already

    mark = node.start_mark if isinstance(node, yaml.Node) else node.problem_mark
    return f"{path}:{mark.line + 1}" if mark is not None else str(path)


def _scalar(node: yaml.ScalarNode) -> str | None:
    """A scalar as viper hands it to clusterctl: the text as written, booleans as
    ``true``/``false``, a null as no value at all."""
    if node.tag == _NULL_TAG:
        return None
    if node.style is None and node.tag == _BOOL_TAG and node.value in _BOOLEANS:
        return str(node.value).lower()
    return str(node.value)


def parse_variables(text: str, path: Path) -> dict[str, str]:
    """``NAME: value`` pairs of a clusterctl-style YAML file.

    Keys whose value is a mapping or a list are clusterctl configuration (``providers``,
    ``images``, ``cert-manager``), not variables, and are skipped. Errors name the file
    and line, never a value."""
    # YAML loads only for a --variables file: every import holds VariableValues, and
    # a re-import without one parses no YAML at all
    import yaml

    from airgap.formats import yamlsafe

    try:
        root = yamlsafe.compose(text, str(path), max_bytes=MAX_VARIABLES_BYTES)
    except yaml.MarkedYAMLError as exc:
        raise InputError(f"{_where(path, exc)}: not valid YAML: {_clean(exc.problem)}") from None
    except yaml.YAMLError:
        raise InputError(f"{path}: not valid YAML") from None
    if root is None:
        return {}
    if not isinstance(root, yaml.MappingNode):
        raise InputError(f"{_where(path, root)}: expected a mapping of NAME: value")
    values: dict[str, str] = {}
    seen: set[str] = set()
    for key, value in root.value:
        if not isinstance(key, yaml.ScalarNode) or not key.value or key.tag == _NULL_TAG:
            raise InputError(f"{_where(path, key)}: every key must be a variable name")
        name = str(key.value)
        if name.lower() in seen:  # viper folds case: FOO and foo are one variable
            raise InputError(f"{_where(path, key)}: variable {name[:100]} is given twice")
        seen.add(name.lower())
        if isinstance(value, yaml.ScalarNode) and (scalar := _scalar(value)) is not None:
            values[name] = scalar
    return values


def load_variables(path: Path) -> dict[str, str]:
    """The ``--variables`` file: a regular file, at most ``MAX_VARIABLES_BYTES``, UTF-8."""
    data = read_small(path, MAX_VARIABLES_BYTES, "variables file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"variables file {path}: not UTF-8 (byte {exc.start})") from None
    return parse_variables(text, path)
