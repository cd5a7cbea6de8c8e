"""Pushing a verified bundle's images into the disconnected registry, byte for byte,
and the configuration nodes need to find it (containerd ``hosts.toml``, the workload
cluster Component), plus the closure check of what the outputs reference.

Layer 8: may import layers 0-7; never ``configmaps`` (a sibling).
"""
