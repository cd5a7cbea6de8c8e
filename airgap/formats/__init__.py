"""Readers of what arrives from outside, bounded in size, depth and time and strict about
what they accept: JSON (``jsonsafe``), YAML for small documents (``yamlsafe``) and for
large streams (``yamlload``, ``yamlskim``), and tar headers (``tarheader``).

Layer 1: may import ``airgap.core`` only.
"""
