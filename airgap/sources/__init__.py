"""Where releases come from: GitHub releases, plain HTTP directories, ``file://`` trees
and single files at a URL (``releases``, ``urlfile``), and the version order
clusterctl uses to pick among them (``semver``).

Layer 3: may import ``airgap.core``, ``airgap.formats`` and ``airgap.net``.
"""
