"""The bundle file: its manifest format (``format``), signatures (``signing``,
``manifestfile``), writing (``writer``), reading one tar stream (``reader``,
``tarread``), parts, deltas and diffs.

Layer 4: may import ``core``, ``formats``, ``net``, ``oci`` and ``sources``.
"""
