"""OCI vocabulary with no I/O of its own: image references (``reference``), manifests,
indexes and descriptors (``manifest``), the image layout's files (``layout``) and the
have-list of digests a registry already holds (``havelist``).

Layer 2: may import ``airgap.core`` and ``airgap.formats``.
"""
