"""Every size and depth bound airgap puts on what it reads, in one place.

Everything airgap parses comes from outside: bundles carried on removable media, release
servers, registries, token services, the user's own files. Each reader takes its bound
from here, so the writer and the reader of the same thing can never disagree (collect
must never sign what verify refuses) and the README can document one table.
"""

from __future__ import annotations

from collections.abc import Mapping

from airgap.core.errors import InputError

KiB = 1 << 10
MiB = 1 << 20

# -- OCI content -------------------------------------------------------------------------
# Image manifests and indexes: containerd and distribution refuse anything larger.
MAX_MANIFEST_BYTES = 4 * MiB
# An image config, fetched whole to learn its platform.
MAX_CONFIG_BYTES = 1 * MiB
# What is attached to one manifest (signatures, attestations, SBOMs): referrers listed
# by the referrers API (and pages of its answer), and layers of one signature manifest
# (cosign appends one layer per signature; real ones hold a handful).
MAX_REFERRERS = 256
MAX_REFERRER_PAGES = 8
MAX_SIGNATURE_LAYERS = 256
# A simple-signing payload (~250 bytes) or a certificate/chain/Rekor bundle annotation.
MAX_SIGNATURE_PAYLOAD_BYTES = 1 * MiB
# A PEM file of trust material (Fulcio roots, Rekor keys, cosign public keys).
MAX_TRUST_FILE_BYTES = 1 * MiB
# A PEM file for TLS: a CA bundle (``--ca-file``, certs.d's ``*.crt``, ``SSL_CERT_FILE``;
# Debian's whole trust store is ~0.2 MiB), a client certificate or key, serve's pair.
MAX_TLS_FILE_BYTES = 4 * MiB

# -- bundles -----------------------------------------------------------------------------
# The signed bundle manifest lists every member (~150 bytes each): room for ~400k.
MAX_BUNDLE_MANIFEST_BYTES = 64 * MiB
# A detached Ed25519 signature in base64 is 89 bytes.
MAX_SIGNATURE_BYTES = 4 * KiB
# A PAX or GNU long-name/long-link header: real ones hold a path, a few hundred bytes.
MAX_EXTENDED_HEADER_BYTES = 1 * MiB
# Extended headers in front of one member (a PAX header and a GNU long name, say).
MAX_EXTENDED_HEADERS_PER_MEMBER = 4

# -- provider releases --------------------------------------------------------------------
# clusterctl metadata.yaml: a handful of release series, a few KiB at most.
MAX_METADATA_BYTES = 1 * MiB
# Any file downloaded from a release (the components file is the big one).
MAX_RELEASE_FILE_BYTES = 64 * MiB
# A components file as airgap parses it (collect, import, configmaps alike; the real
# core-components.yaml is ~1.2 MB). Parsing is linear up to here: ~0.1 s per MB.
MAX_COMPONENTS_BYTES = 16 * MiB
# Components nest deeper than other YAML: CRD schemas embed whole pod templates (~40).
MAX_COMPONENTS_DEPTH = 100
# Nodes that aliases may stand for, in all, in one components file (real ones use none).
MAX_COMPONENTS_ALIAS_NODES = 100_000
# Nodes built into objects from one components file (~400 bytes each): the documents read
# (workloads, Namespaces) hold a few hundred; CRDs and the rest are parsed, never built.
MAX_COMPONENTS_BUILT_NODES = 250_000

# -- Helm chart packages (Helm's own caps: a chart unpacks to 100 MiB at most, and
# none of its files is larger than 5 MiB) --------------------------------------------------
MAX_CHART_UNPACKED_BYTES = 100 * MiB
MAX_CHART_FILE_BYTES = 5 * MiB
# Members of a chart package (Helm has no cap; real charts have tens to hundreds).
MAX_CHART_MEMBERS = 10_000
# A chart's .prov: Chart.yaml, one digest and a signature (real ones are a few KiB).
MAX_PROVENANCE_BYTES = 1 * MiB

# -- HTTP bodies ---------------------------------------------------------------------------
# One page of the GitHub releases API (100 releases with notes and asset lists).
MAX_API_JSON_BYTES = 32 * MiB
# Any other body read whole: token replies, upload and ping answers.
MAX_SMALL_BODY_BYTES = 1 * MiB
# a Content-Length read as text: int() refuses 4,300 digits, and 10^19 bytes is no body
MAX_LENGTH_DIGITS = 19
# An error body, read only to quote its first message.
MAX_ERROR_BODY_BYTES = 64 * KiB

# -- the user's own files -------------------------------------------------------------------
MAX_SPEC_BYTES = 4 * MiB
MAX_POLICY_BYTES = 1 * MiB
# A --variables file: NAME: value pairs (a whole clusterctl.yaml is a few KiB).
MAX_VARIABLES_BYTES = 1 * MiB
# A have-list (collect --have): ~75 bytes a digest, room for ~200,000 of them.
MAX_HAVE_LIST_BYTES = 16 * MiB

# -- structure -----------------------------------------------------------------------------
# Nesting depth of JSON and YAML documents. Real manifests, API answers, specs, policies
# and metadata nest fewer than 10 levels; Kubernetes objects rarely more than 20.
MAX_JSON_DEPTH = 64
MAX_YAML_DEPTH = 64
# YAML nodes counted with aliases expanded, for small documents (specs, policies,
# metadata): a "billion laughs" document reaches this long before it costs anything.
MAX_YAML_NODES = 200_000
# Provider images read for /capi-operator-manifests: what one layer may unpack to (a
# gzip bomb stops here; real layers are far smaller) and how many tar entries it may
# hold. Only the profile files are kept, each under the metadata/components caps.
MAX_LAYER_UNPACKED_BYTES = 16384 * MiB
MAX_LAYER_ENTRIES = 1_000_000
MAX_PROVIDER_IMAGE_LAYERS = 256


def describe_size(size: int) -> str:
    """``4 MiB`` for the caps above, exact bytes otherwise."""
    for unit, name in ((MiB, "MiB"), (KiB, "KiB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size} bytes"


def env_seconds(env: Mapping[str, str], name: str, default: float) -> float:
    """Seconds from the environment variable ``name`` (``default`` when unset); anything
    but a number of seconds above 0 and below 86400 (a day) is an InputError naming the
    variable."""
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 86400:
        raise InputError(
            f"{name}={text!r}: expected a number of seconds above 0 and below 86400 (a day)"
        )
    return value
