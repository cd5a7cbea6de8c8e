"""Cluster API provider releases: provider types and well-known names, metadata and
components files, the contract check, and providers shipped as images.

Layer 4: may import ``core``, ``formats``, ``net``, ``oci``, ``sources`` and
``registry``.
"""
